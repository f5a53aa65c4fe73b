"""Checks of what a user gives, each failing with a clear error (what, the value, the fix).

- `numeric`: whether an argument is a number (`is_integral`, `is_real`), for the public entry points;
- `environment`: settings read from environment variables (`positive_setting`).
"""
