"""Checks the answers before any file is written, so a bad one fails with what was wrong, the value and the fix.

cookiecutter renders this file with Jinja, then runs it inside the new project directory; a non-zero exit makes
cookiecutter remove that directory again. Only the standard library is used: the Python running cookiecutter need
not have tracktrain, torch or fsspec.
"""

from __future__ import annotations

import json
import keyword
import os
import re
import sys

ANSWERS = json.loads({{ cookiecutter | jsonify | jsonify }})

CHOICES = {
    "tracker": ("mlflow", "wandb", "both", "none"),
    "precision": ("32-true", "bf16-mixed", "16-mixed"),
    "strategy": ("single_device", "ddp", "fsdp"),
}
SLUG = re.compile(r"^[a-z][a-z0-9_]*$")
# names the generated package would shadow, so `import torch` (and the like) inside it would find the project
TAKEN_NAMES = {"tracktrain", "tracktrain_integrations", "torch", "sklearn", "numpy", "mlflow", "wandb", "fsspec",
               "tqdm", "tests", "test", "train", "config", "data", "module"}
URL_SCHEME = re.compile(r"^([a-z][a-z0-9+.-]*)://")


def slug_problem(slug: str) -> str | None:
    if not SLUG.match(slug):
        suggestion = re.sub(r"[^a-z0-9_]+", "_", slug.lower()).strip("_")
        suggestion = suggestion if suggestion and suggestion[0].isalpha() else f"project_{suggestion}".rstrip("_")
        return (f"project_slug {slug!r} is not a Python package name: use lowercase letters, digits and "
                f"underscores, starting with a letter (e.g. project_slug={suggestion!r}).")
    if keyword.iskeyword(slug) or slug in TAKEN_NAMES:
        return (f"project_slug {slug!r} would shadow a Python keyword or a package the project imports; "
                f"pick another name (e.g. project_slug={slug + '_project'!r}).")
    return None


def choice_problem(name: str, value: str) -> str | None:
    if value not in CHOICES[name]:
        return f"{name} {value!r} is not one of {list(CHOICES[name])}; pass e.g. {name}={CHOICES[name][0]!r}."
    return None


def checkpoint_problem(location: str) -> str | None:
    if not location.strip() or location != location.strip():
        return (f"checkpoint_location {location!r} must be a directory path or an fsspec URL without surrounding "
                "spaces, e.g. 'runs/checkpoints' or 's3://my-bucket/checkpoints'.")
    if "://" in location:
        match = URL_SCHEME.match(location)
        if match is None:
            return (f"checkpoint_location {location!r} is not a URL fsspec can open: write it as "
                    "PROTOCOL://PATH, e.g. 's3://my-bucket/checkpoints'.")
        try:
            import fsspec  # only to catch a misspelt protocol early; fsspec need not be installed here
        except ImportError:
            return None
        if match.group(1) not in fsspec.available_protocols():
            return (f"checkpoint_location {location!r} uses the protocol {match.group(1)!r}, which fsspec does not "
                    "know; use a known one (file, memory, s3, gs, az, ...) or a local path.")
    return None


def memory_problem(location: str, strategy: str) -> str | None:
    """memory:// lives in one process: torchrun's processes do not share it, and no later command resumes from it."""
    if strategy in ("ddp", "fsdp") and location.startswith("memory://"):
        return (f"checkpoint_location {location!r} lives in one process's memory, which the processes of strategy "
                f"{strategy!r} do not share: use a local path or an object store URL, e.g. 'runs/checkpoints' or "
                "'s3://my-bucket/checkpoints'.")
    return None


def requirement_problem(requirement: str) -> str | None:
    if not requirement.strip() or "\n" in requirement or '"' in requirement:
        return (f"tracktrain_requirement {requirement!r} must be one pip requirement on one line without double "
                "quotes, e.g. 'tracktrain', 'tracktrain @ file:///path/to/tracktrain' or "
                "'tracktrain @ git+https://github.com/ORG/tracktrain'.")
    return None


def output_dir_problem(project_dir: str) -> str | None:
    """cookiecutter has just made the project directory; writing into it must work too (a read-only or full
    disk, or an existing directory without write permission when regenerating with --overwrite-if-exists)."""
    probe = os.path.join(project_dir, ".cookiecutter-write-probe")
    try:
        with open(probe, "w", encoding="utf-8") as file:
            file.write("probe")
        os.remove(probe)
    except OSError as error:
        return (f"cannot write into the output directory {project_dir!r} ({error.strerror or error}); "
                "pass a writable one with --output-dir.")
    return None


def main() -> int:
    problems = [
        slug_problem(ANSWERS["project_slug"]),
        *(choice_problem(name, ANSWERS[name]) for name in CHOICES),
        checkpoint_problem(ANSWERS["checkpoint_location"]),
        memory_problem(ANSWERS["checkpoint_location"], ANSWERS["strategy"]),
        requirement_problem(ANSWERS["tracktrain_requirement"]),
        output_dir_problem(os.getcwd()),
    ]
    problems = [problem for problem in problems if problem]
    for problem in problems:
        print(f"ERROR: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
