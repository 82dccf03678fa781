"""The pull-request workflow ``experiments/ci/perftune-compare.yml``, run here as GitHub would run it.

The workflow file is parsed and its own steps are executed, not a paraphrase of them: its two ``actions/checkout``
steps become two clones of two commits (the ``with: path`` and ``ref`` it gives), its job ``env`` is set (with
``${{ github.workspace }}`` expanded and ``ROUNDS`` lowered to 2 to keep the test short), and its ``run:`` scripts run
with ``bash -e`` in the workspace, as GitHub's default shell does.  One step is replaced: "Install each side into
its own environment" would download MindSpore into two fresh venvs, so each ``venv-<side>/bin/perftune`` is instead
a launcher that runs this interpreter with that side's checkout first on ``PYTHONPATH``; every trial records the git
commit of the perftune it imported, which shows that each side ran its own checkout.

Checked: the rounds ran interleaved (base, change, base, change), each side with its own commit; ``perftune compare``
pooled both rounds per side; its exit code is 0 or 1 and agrees with the Markdown written to
``$GITHUB_STEP_SUMMARY`` and with ``runs/compare.json``.  Which side was faster is not asserted (the two commits run
the same code on a shared machine); the decision rule has its own tests on simulated measurements.

Two fast checks keep the documentation of this path true: the README's test command is the one ``.ci/run`` runs,
and every relative link of the README and its reference pages resolves (file and heading).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parent.parent
WORKFLOW = REPO / "experiments" / "ci" / "perftune-compare.yml"
ROUNDS = 2


def git(cwd: Path, *args: str) -> str:
    ident = ["-c", "user.name=perftune test", "-c", "user.email=test@perftune.invalid", "-c", "commit.gpgsign=false"]
    return subprocess.run(["git", *ident, *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def two_commits(origin: Path) -> tuple[str, str]:
    """A repository at ``origin`` holding this working tree as the base commit and a change on top of it."""
    files = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                           check=True, capture_output=True, text=True).stdout.split("\0")
    for name in filter(None, files):
        if (REPO / name).is_file():
            (origin / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, origin / name)
    git(origin, "init", "-q")
    git(origin, "add", "-A")
    git(origin, "commit", "-q", "-m", "base")
    base = git(origin, "rev-parse", "HEAD")
    with open(origin / "README.md", "a") as f:
        f.write("\nA change under review.\n")
    git(origin, "commit", "-q", "-am", "change")
    return base, git(origin, "rev-parse", "HEAD")


def expand(value: str, workspace: Path) -> str:
    """The one workflow expression the job's env uses; any other would need this test to learn it."""
    value = value.replace("${{ github.workspace }}", str(workspace))
    assert "${{" not in value, f"unexpanded expression in {value!r}"
    return value


def launcher(venv: Path, checkout: Path) -> None:
    """``venv/bin/perftune`` that imports perftune from ``checkout`` (what ``pip install -e ./<side>`` provides)."""
    (venv / "bin").mkdir(parents=True)
    script = venv / "bin" / "perftune"
    script.write_text(f'#!/bin/sh\nPYTHONPATH="{checkout}${{PYTHONPATH:+:$PYTHONPATH}}" exec "{sys.executable}" '
                      "-c 'import sys; sys.argv[0] = \"perftune\"; from perftune.cli import main; main()' \"$@\"\n")
    script.chmod(0o755)


@pytest.mark.slow
def test_workflow_steps_run_locally(tmp_path):
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("needs git and a git checkout of perftune")
    workflow = yaml.safe_load(WORKFLOW.read_text())
    (job,) = workflow["jobs"].values()  # one job on one runner: both sides measured on the same machine
    assert "strategy" not in job, "the sides must not be split into a matrix"

    origin = tmp_path / "origin"
    origin.mkdir()
    base_sha, change_sha = two_commits(origin)
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    refs = {"${{ github.event.pull_request.base.sha }}": base_sha, None: change_sha}
    env = {**os.environ, **{k: expand(str(v), workspace) for k, v in job["env"].items()}}
    env.update(ROUNDS=str(ROUNDS), GITHUB_WORKSPACE=str(workspace),
               GITHUB_STEP_SUMMARY=str(workspace / "step_summary.md"))
    assert Path(env["PLAN"]) == workspace / "change" / "experiments" / "ci" / "tiny.yaml"

    ran, compare_rc = [], None
    for step in job["steps"]:
        name = step.get("name", step.get("uses", ""))
        if step.get("uses", "").startswith("actions/checkout@"):
            side = workspace / step["with"]["path"]
            subprocess.run(["git", "clone", "-q", str(origin), str(side)], check=True)
            git(side, "checkout", "-q", refs[step["with"].get("ref")])
            ran.append(f"checkout {step['with']['path']}")
        elif "run" in step and "pip install" in step["run"]:
            for side in re.findall(r"venv-(\w+)/bin/pip install -q -e \./(\w+)", step["run"]):
                assert side[0] == side[1]
                launcher(workspace / f"venv-{side[0]}", workspace / side[1])
            ran.append("install (launchers)")
        elif "run" in step:
            proc = subprocess.run(["bash", "-e", "-c", step["run"]], cwd=workspace, env=env, capture_output=True,
                                  text=True, timeout=900)
            if "perftune compare" in step["run"]:
                compare_rc = proc.returncode
                assert proc.returncode in (0, 1), f"{name}: exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
            else:
                assert proc.returncode == 0, f"{name}: exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
            ran.append(name)
    assert ran[:3] == ["checkout change", "checkout base", "install (launchers)"], ran
    assert compare_rc is not None, "no step runs perftune compare"

    # interleaved rounds, each side from its own commit
    runs = workspace / "runs"
    sweeps = [(side, r, json.loads((runs / side / str(r) / "results.json").read_text()))
              for r in range(1, ROUNDS + 1) for side in ("base", "change")]
    starts = [s["started_utc"] for _, _, s in sweeps]
    assert starts == sorted(starts) and len(set(starts)) == len(starts), starts
    short = {"base": git(origin, "rev-parse", "--short", base_sha),
             "change": git(origin, "rev-parse", "--short", change_sha)}
    processes = {"base": 0, "change": 0}
    for side, r, sweep in sweeps:
        assert sweep["status"] == "complete", (side, r)
        commits = {t["result"]["environment"]["git_commit"] for t in sweep["trials"]}
        assert commits == {short[side]}, (side, r, commits)
        processes[side] += len(sweep["trials"])  # one; two where the first was contended and measured again

    # compare: the exit code, the JSON and the job summary's Markdown say the same thing
    report = json.loads((runs / "compare.json").read_text())
    assert report["exit_code"] == compare_rc
    # each side's rounds pooled: every process of every sweep, from that side's commit
    assert (report["old"]["trials"], report["new"]["trials"]) == (processes["base"], processes["change"])
    assert (report["old"]["git_commits"], report["new"]["git_commits"]) == ([short["base"]], [short["change"]])
    assert report["threshold"] == pytest.approx(0.05)  # the workflow's THRESHOLD: "5%"
    (config,) = report["configurations"]  # tiny.yaml: the baseline only
    summary = (workspace / "step_summary.md").read_text()
    heading = "regression" if compare_rc else "no significant regression"
    assert summary.startswith(f"### perftune compare: {heading}\n"), summary[:200]
    assert f"commit {short['base']}" in summary and f"commit {short['change']}" in summary
    assert f"| {config['label']} | " in summary


PAGES = ["README.md", "perftune/README.md", "experiments/README.md", "experiments/benchmarks/README.md",
         ".ci/README.md", "reports/README.md"]


def test_readme_commands_are_the_ones_ci_runs():
    """The README's test command is the one ``.ci/run`` runs word for word, and the README shows the workflow."""
    readme = (REPO / "README.md").read_text()
    blocks = re.findall(r"```bash\n(.*?)\n```", readme, flags=re.S)
    test_command = next(b for b in blocks if "pytest" in b)
    assert test_command in [line.strip() for line in (REPO / ".ci" / "run").read_text().splitlines()]
    assert "(experiments/ci/perftune-compare.yml)" in readme
    assert any("perftune sweep experiments/quickstart.yaml" in b for b in blocks)


def anchors(page: Path) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces as hyphens."""
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-")
            for h in re.findall(r"^#+\s+(.*)$", text, flags=re.M)}


def test_the_pages_links_resolve():
    """Every relative link of the README and the reference pages names a file that exists and a heading it has."""
    broken = []
    for name in PAGES:
        page = REPO / name
        text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
        for link in re.findall(r"\]\(([^)\s]+)\)", text):
            if link.startswith(("http://", "https://")):
                continue
            path, _, fragment = link.partition("#")
            target = (page.parent / path).resolve() if path else page
            if not target.exists() or (fragment and (target.is_dir() or fragment not in anchors(target))):
                broken.append(f"{name}: {link}")
    assert broken == []
