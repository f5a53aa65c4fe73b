"""The checks tracktrain's entry points run on what a user gives (arguments, environment variables), so that each
rejects bad input the same clear way (what, the value, the fix).

Internal: tracktrain's own modules import it, users do not, and the API reference leaves it out.

- `numeric`: whether an argument is a number (`is_integral`, `is_real`), which the entry points' errors build on;
- `environment`: settings read from environment variables (`positive_setting`: a ValueError naming the variable,
  its value and the default).
"""
