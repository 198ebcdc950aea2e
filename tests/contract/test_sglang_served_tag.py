"""The sglang role's served-tag play run by ansible-playbook against the lab's docker
stand-in (the rest of the role's tests, which need no Ansible run, are
tests/unit/test_sglang_role.py)."""

from __future__ import annotations

from pathlib import Path

from tests.unit.test_sglang_role import (
    SERVED_TAG,
    _node_with_pinned_image,
    _play_served_tag,
    _tag_problems,
)


def test_install_tags_the_served_image_once_and_verify_checks_the_tag(tmp_path: Path) -> None:
    from sparkctl_lab import registry  # noqa: PLC0415
    from tests.unit import test_lab_docker as lab_docker  # noqa: PLC0415

    node, engine, pinned, image_id = _node_with_pinned_image(tmp_path)
    problems = _tag_problems(node, pinned)
    assert len(problems) == 1 and f"{SERVED_TAG} is missing (" in problems[0], problems
    assert f"the unit runs {pinned}, which is {image_id}" in problems[0]
    # Check mode changes nothing, and passes where nothing was pulled yet.
    assert _play_served_tag(tmp_path, engine, pinned, check=True) == 0
    absent = pinned.rsplit("@", 1)[0] + "@sha256:" + "0" * 64
    assert _play_served_tag(tmp_path, engine, absent, check=True) == 0
    assert node.docker("image", "inspect", SERVED_TAG).returncode == 1
    assert _play_served_tag(tmp_path, engine, pinned) == 1
    assert node.inspect(pinned)["RepoTags"] == [SERVED_TAG]
    assert _tag_problems(node, pinned) == []
    assert _play_served_tag(tmp_path, engine, pinned) == 0
    # The tag on another image (what an older provision leaves): named, then moved back.
    registry.move_tag(node.registry, lab_docker.IMAGE, "moved")
    assert node.docker("pull", lab_docker.IMAGE).returncode == 0
    other = node.inspect(lab_docker.IMAGE)["Id"]
    assert node.docker("tag", other, SERVED_TAG).returncode == 0
    (problem,) = _tag_problems(node, pinned)
    assert f"{SERVED_TAG} is {other}, but the unit runs {pinned}, which is {image_id}" in problem
    assert _play_served_tag(tmp_path, engine, pinned) == 1
    assert _tag_problems(node, pinned) == []
    # What the tag is for: a routine prune keeps the served image.
    assert node.docker("image", "prune", "-f").returncode == 0
    assert node.docker("image", "inspect", pinned).returncode == 0
