"""Survivors of the mutation review of c742d3a: ssh commands and sftp start in /workspace, where the
volumes are. ~/.bashrc's `cd /workspace` must come before the skeleton's interactive-only return
(below it, `ssh host 'proxima train ...'` would run in the home folder), and sshd's sftp subsystem
starts there too."""

import re

from tests.static import test_docker as docker
from tests.static.test_docker import _dry_run, resolve, run_runs

sandbox, keypair = docker.sandbox, docker.keypair  # test_docker's fixtures: stub daemons, a real key


def bashrc_commands() -> list[str]:
    """The commands of the Dockerfile's `{ ...; } > /home/proxima/.bashrc` group, in order."""
    groups = [m.group(1) for rest in run_runs()
              for m in re.finditer(r"\{([^{}]*)\}\s*>\s*/home/proxima/\.bashrc", resolve(rest))]
    assert len(groups) == 1, groups
    return [c.strip() for c in groups[0].split(";") if c.strip()]


def test_bashrc_changes_to_workspace_before_the_skeletons_interactive_only_return():
    commands = bashrc_commands()
    assert "echo 'cd /workspace'" in commands, commands
    assert "cat /etc/skel/.bashrc" in commands, commands
    assert commands.index("echo 'cd /workspace'") < commands.index("cat /etc/skel/.bashrc"), commands


def test_entrypoints_sshd_config_starts_sftp_in_workspace(sandbox, keypair):
    env, _, home = sandbox
    r = _dry_run(env, SSH_AUTHORIZED_KEYS=keypair)
    assert r.returncode == 0, r.stderr
    lines = (home / ".sshd" / "sshd_config").read_text().splitlines()
    assert [line for line in lines if line.startswith("Subsystem ")] == ["Subsystem sftp internal-sftp -d /workspace"]
