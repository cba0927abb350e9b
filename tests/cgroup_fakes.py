"""Fake /proc/self/cgroup, /proc/self/mountinfo and cgroup files under tmp_path, for the tests
of om_format.cgroups' callers (cores: CPU quota; ge.limits: memory limit)."""
from __future__ import annotations

from om_format import cgroups

V2 = [("cgroup2", "/", "cg2", "rw,nsdelegate")]


def fake_cgroup(tmp_path, monkeypatch, membership: str, mounts: list, files: dict) -> None:
    """`mounts`: (fstype, root, mountpoint under tmp_path, superoptions); `files`: path under
    tmp_path -> text.  Mount points are written escaped, as the kernel does (a space: \\040)."""
    for rel, text in files.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    lines = [f"{30 + i} 23 0:{40 + i} {root} {str(tmp_path / point).replace(' ', chr(92) + '040')} rw,relatime "
             f"shared:{i} - {fstype} {fstype} {opts}" for i, (fstype, root, point, opts) in enumerate(mounts)]
    (tmp_path / "cgroup").write_text(membership)
    (tmp_path / "mountinfo").write_text("\n".join(lines) + "\n")
    monkeypatch.setattr(cgroups, "PROC_CGROUP", str(tmp_path / "cgroup"))
    monkeypatch.setattr(cgroups, "PROC_MOUNTINFO", str(tmp_path / "mountinfo"))
