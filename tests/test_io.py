"""The README block writer shared by the report scripts (`pacd_jax.io.replace_marked_block`) and atomic files."""

import pytest

from pacd_jax import io


def test_replaces_only_the_named_block(tmp_path):
    path = tmp_path / "README.md"
    before = "intro\n<!-- a:begin -->\nold a\n<!-- a:end -->\nmiddle\n<!-- b:begin -->\nold b\n<!-- b:end -->\ntail\n"
    path.write_text(before)
    io.replace_marked_block(path, "b", "new b\nsecond line\n")
    assert path.read_text() == before.replace("old b", "new b\nsecond line")
    # writing the same body again leaves the file unchanged
    io.replace_marked_block(path, "b", "new b\nsecond line")
    assert path.read_text() == before.replace("old b", "new b\nsecond line")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["README.md"]  # no temporary file left


@pytest.mark.parametrize("text", ["no markers\n", "<!-- a:begin -->\nonly begin\n", "<!-- a:end -->\n<!-- a:begin -->\n"])
def test_missing_or_misordered_markers_raise_and_leave_the_file(tmp_path, text):
    path = tmp_path / "README.md"
    path.write_text(text)
    with pytest.raises(ValueError, match="has no <!-- a:begin --> ... <!-- a:end --> block"):
        io.replace_marked_block(path, "a", "body")
    assert path.read_text() == text


def test_atomic_files_get_the_permissions_open_would_give(tmp_path):
    """Oracle: a file made by plain ``open`` in the same folder; an existing file keeps its mode."""
    import os

    plain = tmp_path / "plain.json"
    plain.write_text("{}")
    io.write_json(tmp_path / "new.json", {"a": 1})
    assert (tmp_path / "new.json").stat().st_mode & 0o777 == plain.stat().st_mode & 0o777
    os.chmod(plain, 0o640)
    io.write_json(plain, {"a": 2})
    assert plain.stat().st_mode & 0o777 == 0o640 and plain.read_text() == '{"a": 2}\n'
