"""`landfall submit --script DIR`: the packing rules (entry point, what goes in, links, limits) and the archive's
own unpacking, without a process or a bucket."""

from __future__ import annotations

import io
import os
import zipfile
from pathlib import Path

import pytest

from landfall import code_folder
from landfall.code_folder import MAX_FILES, pack_folder
from landfall.errors import CommandError
from landfall.folder_entry import ENTRY_MEMBER, unpacked


def team_folder(root: Path) -> Path:
    folder = root / "trainer-code"
    (folder / "models").mkdir(parents=True)
    (folder / "main.py").write_text("from models.net import width\nprint(width())\n")
    (folder / "models" / "__init__.py").write_text("")
    (folder / "models" / "net.py").write_text("def width():\n    return 7\n")
    (folder / "config.yaml").write_text("lr: 0.1\n")
    return folder


def members(data: bytes) -> dict[str, bytes]:
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        return {name: archive.read(name) for name in archive.namelist()}


def test_a_folder_packs_its_files_its_entry_and_the_runner_the_same_bytes_each_time(tmp_path: Path) -> None:
    folder = team_folder(tmp_path)
    (folder / ".env").write_text("TOKEN=secret")
    (folder / ".git").mkdir()
    (folder / ".git" / "HEAD").write_text("ref")
    (folder / "models" / "__pycache__").mkdir()
    (folder / "models" / "__pycache__" / "net.cpython-311.pyc").write_bytes(b"\0")
    packed = pack_folder(folder)
    got = members(packed.data)
    assert set(got) == {"__main__.py", ENTRY_MEMBER, "main.py", "models/__init__.py", "models/net.py", "config.yaml"}
    assert got[ENTRY_MEMBER] == b"main.py" and got["models/net.py"] == (folder / "models" / "net.py").read_bytes()
    assert got["__main__.py"] == Path(code_folder.__file__).with_name("folder_entry.py").read_bytes()
    assert (packed.name, packed.files) == ("trainer-code.pyz", 4)
    os.utime(folder / "main.py", (1, 1))  # a touched file, the same bytes: the same archive, so the same object
    assert pack_folder(folder).data == packed.data


def test_the_entry_is_main_py_unless_entry_names_another_and_a_missing_one_lists_the_candidates(
    tmp_path: Path,
) -> None:
    folder = team_folder(tmp_path)
    (folder / "main.py").rename(folder / "train.py")
    (folder / "evaluate.py").write_text("")
    with pytest.raises(CommandError, match=r"has no main.py.*--entry NAME.*evaluate.py, train.py"):
        pack_folder(folder)
    assert members(pack_folder(folder, "train.py").data)[ENTRY_MEMBER] == b"train.py"
    assert members(pack_folder(folder, "models/net.py").data)[ENTRY_MEMBER] == b"models/net.py"


@pytest.mark.parametrize(
    ("entry", "says"),
    [("../main.py", r"no '\.\.'"), ("/etc/main.py", "not absolute"), ("config.yaml", r"NAME\.py"), ("", "inside")],
)
def test_an_entry_outside_the_folder_or_not_python_is_refused(tmp_path: Path, entry: str, says: str) -> None:
    with pytest.raises(CommandError, match=says):
        pack_folder(team_folder(tmp_path), entry)


def test_links_inside_the_folder_are_followed_and_links_that_leave_it_are_refused(tmp_path: Path) -> None:
    folder = team_folder(tmp_path)
    (folder / "settings.yaml").symlink_to(folder / "config.yaml")
    assert members(pack_folder(folder).data)["settings.yaml"] == b"lr: 0.1\n"
    secret = tmp_path / "id_rsa"
    secret.write_text("key")
    (folder / "key").symlink_to(secret)
    with pytest.raises(CommandError, match=r"links to .*id_rsa, outside"):
        pack_folder(folder)
    (folder / "key").unlink()
    (folder / "escape").symlink_to("../../")
    with pytest.raises(CommandError, match="is a link to a folder"):
        pack_folder(folder)
    (folder / "escape").unlink()
    (folder / "gone.py").symlink_to(folder / "nowhere.py")
    with pytest.raises(CommandError, match="a broken link"):
        pack_folder(folder)


def test_more_files_or_bytes_than_the_limits_are_refused_naming_the_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = team_folder(tmp_path)
    for i in range(MAX_FILES - 3):  # 4 files already: MAX_FILES + 1 in all
        (folder / f"part_{i}.py").write_text("")
    with pytest.raises(CommandError, match=f"more than {MAX_FILES} files"):
        pack_folder(folder)
    big = team_folder(tmp_path / "big")
    monkeypatch.setattr(code_folder, "MAX_BYTES", 1024 * 1024)
    (big / "weights.bin").write_bytes(b"\0" * (1024 * 1024))
    with pytest.raises(CommandError, match=r"more than 1 MiB \(MAX_BYTES\).*weights.bin"):
        pack_folder(big)


def test_names_landfall_writes_into_the_archive_are_refused_at_the_top_level(tmp_path: Path) -> None:
    folder = team_folder(tmp_path)
    (folder / "__main__.py").write_text("")
    with pytest.raises(CommandError, match=r"may not hold __main__\.py"):
        pack_folder(folder)


def test_the_archive_unpacks_once_beside_itself_and_a_second_process_uses_that_copy(tmp_path: Path) -> None:
    archive = tmp_path / "code" / "trainer-code.pyz"
    archive.parent.mkdir()
    archive.write_bytes(pack_folder(team_folder(tmp_path)).data)
    first = Path(unpacked(str(archive)))
    assert first.parent == archive.parent and (first / "models" / "net.py").read_text().startswith("def width")
    (first / "marker").write_text("first copy")
    assert unpacked(str(archive)) == str(first) and (first / "marker").exists()
    assert sorted(p.name for p in archive.parent.iterdir()) == sorted([archive.name, first.name])  # no staging left


def test_submit_uploads_a_folder_as_its_archive_and_entry_goes_with_a_folder_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from landfall.commands import submit

    sent: list[tuple[bytes, str, str]] = []

    def upload(data: bytes, file_name: str, kind: str, what: str) -> str:
        sent.append((data, file_name, kind))
        return f"gs://code/{kind}/0/{file_name}"

    monkeypatch.setattr(submit, "upload_bytes", upload)
    folder = team_folder(tmp_path)
    assert submit.upload_script(str(folder), "models/net.py") == "gs://code/scripts/0/trainer-code.pyz"
    ((data, _, _),) = sent
    assert data == pack_folder(folder, "models/net.py").data
    with pytest.raises(CommandError, match="--entry goes with --script DIR"):
        submit.upload_script(str(folder / "main.py"), "main.py")


def test_the_request_takes_the_archive_as_its_script_and_still_refuses_other_files() -> None:
    from schemas.errors import SchemaError
    from schemas.training_request import parse_training_request

    def request(script: str) -> dict[str, object]:
        return {"idempotency_key": "k", "dataset": {"uri": "gs://b/d/"}, "trainer": {"script": script},
                "workload": {"parameters": 10}}  # fmt: skip

    assert parse_training_request(request("gs://code/scripts/0/trainer-code.pyz")).trainer.script.endswith(".pyz")
    with pytest.raises(SchemaError, match=r"\.pyz"):
        parse_training_request(request("gs://code/scripts/0/trainer-code.zip"))


def test_submit_script_dir_builds_a_request_the_schema_takes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from landfall.cli import build_parser
    from landfall.commands import submit
    from schemas.training_request import parse_training_request

    monkeypatch.setattr(submit, "upload_bytes", lambda data, name, kind, what: f"gs://code/{kind}/0/{name}")
    folder = team_folder(tmp_path)
    (folder / "main.py").rename(folder / "train.py")
    args = build_parser().parse_args(
        ["submit", "--script", str(folder), "--entry", "train.py", "--data", "gs://b/d/", "--params", "10"]
    )
    request = parse_training_request(submit.code_request(args))
    assert request.trainer.script == "gs://code/scripts/0/trainer-code.pyz"
