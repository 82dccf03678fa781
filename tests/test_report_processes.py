"""Issue 39: the report shows every process of every comparison, in a real browser (headless Chromium, as
test_report.py).  Read from a real quickstart sweep, ``tests/data/quickstart_paired/`` (repeats of ``+mode=graph``,
paired processes of two data-pipeline changes: the committed sample before ceilings skipped those two alone); the copy's one edit scripts contention: the stack's reference process
(the first baseline run) marked "not used" and a repeat marked as measured with one contended window.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from test_report import chromium_path, open_in_chromium

from perftune.report import write_report

SAMPLE = Path(__file__).resolve().parent / "data" / "quickstart_paired"
ROWS_JS = """(() => {
  const rows = id => [...document.querySelectorAll('#' + id + ' tbody tr')].map(tr => ({
    trial: tr.dataset.trial, text: tr.innerText,
    reason: (tr.querySelector('td.col-reason') || {}).offsetHeight || 0,
    folded: !!tr.querySelector('td.col-reason details')}));
  const table = document.querySelector('#singles-table');
  return {singles: rows('singles-table'), ablation: rows('ablation-table'),
          diffs: [...document.querySelectorAll('#loss-difference-table tbody tr td:first-child')]
            .map(td => td.innerText),
          mfuHeaders: [...document.querySelectorAll('#mfu-table th')].map(th => th.innerText),
          folded: (document.querySelector('#mfu-folded') || {}).innerText || '',
          overflow: table.parentElement.scrollWidth - table.parentElement.clientWidth,
          viewport: window.innerWidth};
})()"""


def contended_copy(folder: Path) -> dict:
    folder.mkdir()
    data = json.loads((SAMPLE / "results.json").read_text())
    first = data["trials"][0]
    assert first["kind"] == "baseline" and data["stack"][0]["trial_id"] == first["trial_id"]
    first["excluded"] = "measured while another process used the cores: not used"
    repeat = next(t for t in data["trials"] if t["kind"] == "repeat")
    repeat["result"]["contended_windows"] = 1
    (folder / "results.json").write_text(json.dumps(data))
    return data


def test_every_process_of_every_comparison_in_chromium(tmp_path):
    chromium_path()
    data = contended_copy(tmp_path / "sweep")
    html = write_report(tmp_path / "sweep")
    page = open_in_chromium(html, tmp_path / "browser")
    assert page["errors"] == [], page["errors"]
    facts = page["facts"]
    from test_report import chrome_driver  # the same browser, for the rows' layout

    (tmp_path / "browser2").mkdir()
    driver = chrome_driver(chromium_path(), tmp_path / "browser2", 1280)
    try:
        driver.get(html.resolve().as_uri())
        rows = driver.execute_script("return " + ROWS_JS)
    finally:
        driver.quit()
    trials = data["trials"]
    # every process of the one-at-a-time comparisons, each on its own line, grouped under its configuration
    expected = [t["trial_id"] for t in trials if t["kind"] == "baseline"]
    for single in (t for t in trials if t["kind"] == "single"):
        expected.append(single["trial_id"])
        expected += [t["trial_id"] for t in trials if t["kind"] == "repeat" and t["label"] == single["label"]]
        expected += [p["trial_id"] for p in data["paired"]
                     if p["candidate"] == single["label"] and p["reference"] == "baseline"]
    assert [r["trial"] for r in rows["singles"]] == expected
    assert facts["singles"] == expected
    texts = {r["trial"]: r["text"] for r in rows["singles"]}
    for p in (p for p in data["paired"] if p["reference"] == "baseline" and p["candidate"] != "baseline"):
        line = texts[p["trial_id"]]
        assert f"{p['candidate']} (paired run {p['replicate'] + 1})" in line and " [" in line, line  # ratio [CI]
    for t in (t for t in trials if t["kind"] == "repeat"):
        assert f"{t['label']} (run {t['replicate'] + 1})" in texts[t["trial_id"]]
    # contended processes marked on their lines; the one not used is never the cumulative table's reference
    assert "[contended, not used]" in texts[trials[0]["trial_id"]] and "not used" in texts[trials[0]["trial_id"]]
    repeat = next(t for t in trials if t["kind"] == "repeat")
    assert "[contended: 1 of" in texts[repeat["trial_id"]]
    reference = rows["ablation"][0]
    assert reference["trial"] != trials[0]["trial_id"] and "run 1 was not used" in reference["text"]
    # long reasons are folded (a short reason, the full text on demand), so no row grows tall
    long = [r for r in rows["singles"] + rows["ablation"] if r["folded"]]
    assert long, "the sample has reasons longer than the fold"
    assert max(r["reason"] for r in rows["singles"] + rows["ablation"]) < 120, rows
    assert rows["overflow"] <= 0, rows["overflow"]  # the table fits the page: nothing cut at the right edge
    # repeats labelled with their run numbers in the loss-difference legend and table; MFU unknown everywhere: folded
    assert len(rows["diffs"]) == len(set(rows["diffs"])), rows["diffs"]
    assert "MFU" not in rows["mfuHeaders"]
    assert "for every trial" in rows["folded"]


def test_every_process_in_the_markdown_table(tmp_path):
    from perftune.io.files import read_sweep
    from perftune.report.tables import markdown_report

    shutil.copy(SAMPLE / "results.json", tmp_path / "results.json")
    text = markdown_report(read_sweep(tmp_path))
    assert "+mode=graph (run 2)" in text and "+num_parallel_workers=2 (paired run 3)" in text
