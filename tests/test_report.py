"""The HTML report, rendered from a real sweep (the session's ``quick_sweep``) and opened in headless Chromium.

The browser is driven by Selenium 4 (the ``test`` extra) through chromedriver; Chromium and its driver come from
Debian (``apt-get install -y chromium chromium-driver``).  Without either, or without selenium, the browser tests are
skipped with the reason.  A screenshot is written under the test's tmp folder and,
with ``PERFTUNE_KEEP_ARTIFACTS`` set, copied to ``tests/artifacts/report.png``.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
from html.parser import HTMLParser
from pathlib import Path

import pytest
import yaml

from perftune.cli import main
from perftune.compat import cli_runner
from perftune.engine.plan_load import parse_plan
from perftune.report import write_report
from perftune.report.load import lone_trial

HOSTILE = "<script>alert(1)</script>"
ARTIFACTS = Path(__file__).resolve().parent / "artifacts"
PAGE_JS = """(() => {
  const rows = id => [...document.querySelectorAll('#' + id + ' tbody tr')].map(tr => tr.dataset.trial);
  return {
    images: [...document.images].map(i => ({alt: i.alt, complete: i.complete, width: i.naturalWidth,
                                           height: i.naturalHeight})),
    ablation: rows('ablation-table'), singles: rows('singles-table'), loo: rows('loo-table'),
    notes: document.querySelectorAll('#notes-table tbody tr').length,
    headers: [...document.querySelectorAll('#singles-table th')].map(th => th.textContent),
    samples: [...document.querySelectorAll('.sample')].map(d => ({trial: d.dataset.trial,
                                                                text: d.querySelector('pre').textContent})),
    scripts: document.scripts.length,
    title: document.title,
    text: document.body.innerText,
  };
})()"""


def chromium_path() -> str:
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if exe is None:
        pytest.skip("chromium not installed: apt-get install -y chromium (Debian) to run the browser checks")
    return exe


def copy_sweep(src: Path, dst: Path) -> Path:
    """The sweep folder without its dataset cache (trials, profiles and results.json are what the report reads)."""
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("cache"))
    return dst


# ---- the browser: Selenium 4 driving Debian's chromium through its chromium-driver -----------------------------------
def chrome_driver(exe: str, work: Path, width: int):
    """A headless Chromium under Selenium, with the browser's console and network logs kept for the checks."""
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium not installed: pip install -e '.[test]'")
    from selenium.webdriver.chrome.service import Service

    driver_exe = shutil.which("chromedriver")
    if driver_exe is None:
        pytest.skip("chromedriver not installed: apt-get install -y chromium-driver (Debian) to run the browser checks")
    options = webdriver.ChromeOptions()
    options.binary_location = exe
    for arg in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                "--disable-extensions", "--mute-audio", "--hide-scrollbars", f"--user-data-dir={work / 'profile'}",
                f"--window-size={width},900"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    service = Service(executable_path=driver_exe, log_output=str(work / "chromedriver.log"))
    driver = webdriver.Chrome(options=options, service=service)
    driver.set_page_load_timeout(60)
    driver.set_script_timeout(60)
    return driver


def open_in_chromium(html_path: Path, work: Path, width: int = 1280) -> dict:
    """Load ``html_path`` in headless Chromium: page facts (``PAGE_JS``), every request, errors, a screenshot."""
    from selenium.common.exceptions import UnexpectedAlertPresentException

    exe = chromium_path()
    work.mkdir(parents=True, exist_ok=True)
    driver = chrome_driver(exe, work, width)
    url = html_path.resolve().as_uri()
    errors = []
    try:
        driver.get(url)  # returns after the load event
        try:
            facts = driver.execute_script("return " + PAGE_JS)
        except UnexpectedAlertPresentException as exc:  # a script in the page opened a dialog
            errors.append(f"dialog opened: {exc.alert_text}")
            facts = driver.execute_script("return " + PAGE_JS)
        height = driver.execute_cdp_cmd("Page.getLayoutMetrics", {})["cssContentSize"]["height"]
        shot = driver.execute_cdp_cmd("Page.captureScreenshot", {
            "format": "png", "captureBeyondViewport": True,
            "clip": {"x": 0, "y": 0, "width": width, "height": min(height, 16000), "scale": 1}})
        console = driver.get_log("browser")
        network = [json.loads(e["message"])["message"] for e in driver.get_log("performance")]
    finally:
        driver.quit()
    screenshot = work / "report.png"
    screenshot.write_bytes(base64.b64decode(shot["data"]))
    # the page's own requests (the browser's new-tab page loads its own before the report's)
    sent = [m["params"] for m in network if m["method"] == "Network.requestWillBeSent"
            and m["params"].get("documentURL") == url]
    requests, ids = [p["request"]["url"] for p in sent], {p["requestId"] for p in sent}
    errors += [f"load failed: {m['params'].get('errorText')}" for m in network
               if m["method"] == "Network.loadingFailed" and m["params"]["requestId"] in ids]
    # console.error/warn, uncaught exceptions and the browser's own errors (a CSP violation is one) all land here
    errors += [f"{e['level']} ({e.get('source', 'console')}): {e['message']}" for e in console
               if e["level"] in ("SEVERE", "WARNING")]
    return {"url": url, "facts": facts, "requests": requests, "errors": errors, "screenshot": screenshot}


# ---- static checks of the file ---------------------------------------------------------------------------------------
class Links(HTMLParser):
    def __init__(self):
        super().__init__()
        self.hrefs: list[str] = []
        self.srcs: list[str] = []
        self.tags: set[str] = set()

    def handle_starttag(self, tag, attrs):
        self.tags.add(tag)
        a = dict(attrs)
        if tag == "a" and a.get("href"):
            self.hrefs.append(a["href"])
        if a.get("src"):
            self.srcs.append(a["src"])


def parse(html: str) -> Links:
    links = Links()
    links.feed(html)
    return links


def expected_rows(results: dict) -> dict[str, list[str]]:
    """Every process of the one-at-a-time comparisons (issue 39): the baseline's, then each change's first process,
    its repeats and its paired processes; the cumulative table's rows never a process the sweep did not use."""
    trials = results["trials"]
    singles = [t["trial_id"] for t in trials if t["kind"] == "baseline"]
    for single in (t for t in trials if t["kind"] == "single"):
        singles.append(single["trial_id"])
        singles += [t["trial_id"] for t in trials if t["kind"] == "repeat" and t["label"] == single["label"]]
        singles += [p["trial_id"] for p in results.get("paired", [])
                    if p["candidate"] == single["label"] and p["reference"] == "baseline"]

    def used(trial_id: str) -> str:
        trial = next(t for t in trials if t["trial_id"] == trial_id)
        if not trial.get("excluded"):
            return trial_id
        return next((t["trial_id"] for t in trials if t["label"] == trial["label"] and not t.get("excluded")
                     and t["result"]["status"] == "ok"), trial_id)

    return {
        "ablation": [used(s["trial_id"]) for s in results["stack"]],
        "singles": singles,
        "loo": [t["trial_id"] for t in results["trials"] if t["kind"] == "leave_one_out"],
    }


# ---- tests -----------------------------------------------------------------------------------------------------------
def measured(sweep: Path) -> dict:
    """results.json of ``sweep``, after checking that the fixture measured something (else the cause is upstream)."""
    results = json.loads((sweep / "results.json").read_text())
    ok = [t for t in results["trials"] if t["result"]["status"] == "ok"]
    assert ok, (f"the quick_sweep fixture measured nothing: {[(t['label'], t['reason']) for t in results['trials']]}"
                f"; see {sweep}/trials/*/burst.log")
    return results


@pytest.mark.smoke
def test_sweep_writes_a_self_contained_report(quick_sweep):
    """The sweep command wrote report.html itself; it needs nothing outside the file but the trace links."""
    measured(quick_sweep)
    html = (quick_sweep / "report.html").read_text(encoding="utf-8")
    links = parse(html)
    assert "script" not in links.tags and "link" not in links.tags and "iframe" not in links.tags
    assert links.srcs and all(src.startswith("data:image/png;base64,") for src in links.srcs)
    assert "Content-Security-Policy" in html
    results = json.loads((quick_sweep / "results.json").read_text())
    traces = [f"trials/{t['trial_id']}/{t['result']['profile']['trace_file']}" for t in results["trials"]
              if (t["result"].get("profile") or {}).get("trace_file")]
    for href in links.hrefs:
        assert href.startswith("#") or href.startswith("trials/") or href.startswith("https://ui.perfetto.dev"), href
    for trace in traces:
        assert trace in links.hrefs
        assert (quick_sweep / trace).is_file(), f"trace link points at a missing file: {trace}"
    assert results["plan"]["name"] in html and "perftune sweep" in html


def test_report_in_headless_chromium(quick_sweep, tmp_path):
    chromium_path()
    measured(quick_sweep)
    folder = copy_sweep(quick_sweep, tmp_path / "sweep")
    path = write_report(folder)
    assert path == folder / "report.html"
    page = open_in_chromium(path, tmp_path / "browser")
    facts = page["facts"]

    results = json.loads((folder / "results.json").read_text())
    for img in facts["images"]:
        assert img["complete"] and img["width"] > 0 and img["height"] > 0, f"figure did not load: {img}"
    alts = {img["alt"] for img in facts["images"]}
    expected = {"Throughput per trial", "Time splits per trial", "Loss curves: every configuration (accuracy failures dashed red)",
                "Peak memory per trial", "Loss difference from the baseline at equal samples seen",
                "Throughput drift over each trial's timed windows", "Compile time and step time per trial"} | (
        {"Cumulative speed-up waterfall"} if len(results["stack"]) > 1 else set())  # MFU: no peak in the test cache
    assert alts == expected, f"figures: {sorted(alts)}"
    rows = expected_rows(results)
    assert facts["ablation"] == rows["ablation"]
    assert facts["singles"] == rows["singles"]
    assert facts["loo"] == rows["loo"]
    assert facts["notes"] == len({t["trial_id"] for t in results["trials"]})
    for t in results["trials"]:
        assert t["label"] in facts["text"]

    off_file = [u for u in page["requests"] if not (u.startswith("data:") or u == page["url"])]
    assert off_file == [], f"the report fetched something besides itself and its data: URIs: {off_file}"
    assert page["errors"] == [], page["errors"]
    assert facts["scripts"] == 0

    shot = page["screenshot"]
    assert shot.stat().st_size > 50_000
    if os.environ.get("PERFTUNE_KEEP_ARTIFACTS"):
        ARTIFACTS.mkdir(exist_ok=True)
        shutil.copyfile(shot, ARTIFACTS / "report.png")


def hostile_copy(quick_sweep: Path, dst: Path) -> Path:
    """The real sweep with attacker-controlled text in a reason, a log tail, an op name, a label and the plan.

    (The plan's name cannot carry it: the plan's pattern allows letters, digits and ``_.-``, and results.json is read
    back through the same typed model; the workload reference is free text.)"""
    folder = copy_sweep(quick_sweep, dst)
    results = json.loads((folder / "results.json").read_text())
    results["plan"]["workload"] = f"mlp {HOSTILE}"
    failed = results["trials"][-1]
    failed["verdict"] = "failed"
    failed["reason"] = f"burst crashed: {HOSTILE}"
    failed["label"] = f"{failed['label']} {HOSTILE}"
    failed["result"].update(status="failed", reason=HOSTILE, log_tail=f"Traceback (most recent call last):\n{HOSTILE}")
    base = results["trials"][0]["result"]
    if base.get("profile") and base["profile"].get("top_op_types"):  # the report lists operators by type
        base["profile"]["top_op_types"][0]["op_type"] = HOSTILE
    elif base.get("profile") and base["profile"].get("top_ops"):
        base["profile"]["top_ops"][0]["name"] = HOSTILE
    else:
        base["profile"] = {"top_ops": [{"name": HOSTILE, "op_type": "MatMul", "phase": "forward", "count": 1,
                                        "total_ms": 1.0, "mean_ms": 1.0, "share": 1.0}]}
    (folder / "results.json").write_text(json.dumps(results))
    return folder


def test_hostile_text_is_escaped(quick_sweep, tmp_path):
    folder = hostile_copy(quick_sweep, tmp_path / "sweep")
    html = write_report(folder).read_text(encoding="utf-8")
    assert "<script" not in html.lower()
    escaped = "&lt;script&gt;alert(1)&lt;/script&gt;"
    # heading, operator type, label (tables, notes, failed section), reason, log tail, plan YAML
    assert html.count(escaped) >= 6, html.count(escaped)
    assert "Traceback (most recent call last):" in html


def test_hostile_text_shows_as_text_in_chromium(quick_sweep, tmp_path):
    chromium_path()
    folder = hostile_copy(quick_sweep, tmp_path / "sweep")
    page = open_in_chromium(write_report(folder), tmp_path / "browser")
    assert page["facts"]["scripts"] == 0
    assert HOSTILE in page["facts"]["text"]
    assert page["errors"] == [], page["errors"]  # no alert dialog, no CSP violation


def test_report_when_every_trial_failed(quick_sweep, tmp_path):
    """Nothing measured (the baseline itself failed): the report still renders, says why, and draws nothing."""
    folder = copy_sweep(quick_sweep, tmp_path / "sweep")
    results = json.loads((folder / "results.json").read_text())
    results.update(stack=[], best_label=None, best_trial_id=None, best_vs_baseline=None, aa_check=None,
                   status="interrupted")
    for t in results["trials"]:
        t.update(verdict="timeout", reason="burst exceeded timeout_s=120", vs_baseline=None, vs_previous=None)
        t["result"].update(status="timeout", reason="burst exceeded timeout_s=120", windows=[], samples_per_s=None,
                           step_ms_median=None, accuracy=None, profile=None, log_tail="last line of the log")
        t["result"]["memory"] = {}
        # a trial that timed out has no figures in its own file either: the report believes a sealed trial file
        # over results.json (io/crosscheck.py), so the measured ones go
        (folder / "trials" / t["trial_id"] / "trial.json").unlink(missing_ok=True)
    (folder / "results.json").write_text(json.dumps(results))
    html = write_report(folder).read_text(encoding="utf-8")
    links = parse(html)
    assert links.srcs == []
    assert "Failed trials" in html and "burst exceeded timeout_s=120" in html and "last line of the log" in html
    assert "interrupted" in html and "No figure:" in html


@pytest.mark.smoke
def test_report_command(quick_sweep, tmp_path):
    folder = copy_sweep(quick_sweep, tmp_path / "sweep")
    (folder / "report.html").unlink()
    result = cli_runner().invoke(main, ["report", str(folder)])
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == str(folder / "report.html")
    assert "Cumulative ablation" in (folder / "report.html").read_text(encoding="utf-8")


@pytest.mark.smoke
def test_report_command_without_results(tmp_path):
    result = cli_runner().invoke(main, ["report", str(tmp_path)])
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "results.json" in lines[0] and str(tmp_path) in lines[0], result.stderr


def test_a_lone_trial_is_labelled_by_its_changes_not_as_a_baseline(quick_sweep, tmp_path):
    """``perftune report`` on one trial's folder (``perftune run``'s, here a quick_sweep trial with recompute=true):
    the trial is labelled by its knobs away from perftune's defaults, "measured", never "baseline (run 1)" nor the
    reference of a comparison that did not happen (issue 28 item 6)."""
    results = measured(quick_sweep)
    base = next(t for t in results["trials"] if t["kind"] == "baseline" and t["result"]["status"] == "ok")
    folder = tmp_path / "run"
    shutil.copytree(quick_sweep / "trials" / base["trial_id"], folder)
    trial = json.loads((folder / "trial.json").read_text())
    trial["knobs"]["recompute"] = True
    (folder / "trial.json").write_text(json.dumps(trial))
    result = cli_runner().invoke(main, ["report", str(folder)])
    assert result.exit_code == 0, result.output
    html = (folder / "report.html").read_text(encoding="utf-8")
    assert "+prefetch_size=2 +recompute=true" in html  # the plan's prefetch_size=2 is a change from the default 16
    assert "(run 1)" not in html and ">reference<" not in html and "baseline (run" not in html
    assert ">measured<" in html
    # its spec.json says how it was launched: not "perftune.Callback", and the plan shown reproduces it (it validates)
    assert "perftune.Callback" not in html and "one burst (baseline)" in html
    plan = lone_trial(folder).result.plan
    again = parse_plan(yaml.safe_load(yaml.safe_dump(plan.model_dump(mode="json"))))
    assert again.baseline == plan.baseline and again.accuracy.samples == plan.accuracy.samples > 0
