#!/usr/bin/python3
"""weft board in a real browser (Debian's chromium, chromium-driver, python3-selenium): for three
training runs, one of which evaluated once, a run whose loss went to NaN and infinity, and a run
whose event file's last record is corrupt, every raw point the page plots is the value the event files hold (read
here by a decoder of their own), a one-point series shows as a marker where the axes put its value,
ticks fall on 1, 2 or 5 x 10^k and their labels read back as their values (bytes in KiB/MiB/GiB),
NaN and infinity are named rather than drawn, the charts are grouped by tag prefix, the legend
hides and shows runs, a corrupt file plots the records before its bad one and is named with the
reader's reason while the other runs plot, the smoothing slider moves the smoothed lines but not the
raw points, and a refresh does not wipe the hover line under the mouse. A --logdir that is itself a run names it after its directory; one whose runs hold no
scalars says so. Screenshots of the page go to the working directory (ctest's: the build directory).

Usage: board_test.py WEFT"""
import glob
import math
import json
import os
import re
import struct
import subprocess
import sys
import tempfile

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

weft = sys.argv[1]
failures = []


def check(condition, what):
    print(("ok: " if condition else "FAILED: ") + what)
    if not condition:
        failures.append(what)


def varint(data, pos):
    value, shift = 0, 0
    while True:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7


def fields(data):
    """(field number, wire type, value) of a protobuf message; values of length-delimited fields are bytes."""
    pos = 0
    while pos < len(data):
        key, pos = varint(data, pos)
        field, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = varint(data, pos)
        elif wire == 1:
            value, pos = data[pos:pos + 8], pos + 8
        elif wire == 5:
            value, pos = data[pos:pos + 4], pos + 4
        elif wire == 2:
            n, pos = varint(data, pos)
            value, pos = data[pos:pos + n], pos + n
        else:
            raise ValueError("unexpected wire type %d" % wire)
        yield field, wire, value


def scalars(path):
    """{tag: [(step, value)]} of a TFRecord file of Events (length u64 | crc u32 | payload | crc u32):
    Event{step=2, summary=5}, Summary{value=1}, Value{tag=1, simple_value=2 float}."""
    data = open(path, "rb").read()
    out, pos = {}, 0
    while pos < len(data):
        (length,) = struct.unpack_from("<Q", data, pos)
        event = data[pos + 12:pos + 12 + length]
        pos += 12 + length + 4
        step, values = 0, []
        for field, _, value in fields(event):
            if field == 2:
                step = value
            elif field == 5:
                for summary_field, _, summary_value in fields(value):
                    if summary_field == 1:
                        parts = {f: v for f, _, v in fields(summary_value)}
                        if 2 in parts:
                            values.append((parts[1].decode(), struct.unpack("<f", parts[2])[0]))
        for tag, value in values:
            out.setdefault(tag, []).append([step, value])
    return out


def crc32c(data):
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    crc ^= 0xFFFFFFFF
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def write_scalars(path, tag, points):
    """An event file of one tag's (step, value) points, as the decoder above reads them."""
    def field(number, wire, payload):
        return bytes([number << 3 | wire]) + (bytes([len(payload)]) if wire == 2 else b"") + payload
    with open(path, "wb") as out:
        for step, value in points:
            value_message = field(1, 2, tag.encode()) + field(2, 5, struct.pack("<f", value))
            event = field(1, 1, struct.pack("<d", 1.0 + step)) + field(2, 0, bytes([step])) + \
                field(5, 2, field(1, 2, value_message))
            length = struct.pack("<Q", len(event))
            out.write(length + struct.pack("<I", crc32c(length)) + event + struct.pack("<I", crc32c(event)))


def number(label):
    """The value a compact axis label stands for: 1.5k, 3e-4, 12 MiB."""
    match = re.fullmatch(r"(-?[0-9.]+(?:e-?[0-9]+)?)([kMGT]?)(?: (B|KiB|MiB|GiB|TiB))?", label)
    if not match:
        return None
    units = ["B", "KiB", "MiB", "GiB", "TiB"]
    return float(match[1]) * 1000 ** " kMGT".index(match[2] or " ") * 1024 ** (units.index(match[3]) if match[3] else 0)


def nice(step):
    mantissa = step / 10 ** math.floor(math.log10(step) + 1e-9)
    return any(abs(mantissa - m) < 1e-6 for m in (1, 2, 5))


def axes(driver):
    """{tag: {"x"|"y": [(value, label, position)]}} of every chart's tick labels."""
    ticks = driver.execute_script(
        "return [...document.querySelectorAll('text.tick')].map(t => [t.closest('.chart').dataset.tag,"
        " t.dataset.axis, Number(t.dataset.value), t.textContent, Number(t.getAttribute(t.dataset.axis))]);")
    out = {}
    for tag, axis, value, label, position in ticks:
        out.setdefault(tag, {}).setdefault(axis, []).append((value, label, position - (3 if axis == "y" else 0)))
    return out


def plotted(driver, kind):
    """{(tag, run): [[step, value]]} of the page's polylines of one kind."""
    lines = driver.execute_script(
        "return [...document.querySelectorAll('polyline.%s')].map(l => [l.closest('.chart').dataset.tag,"
        " l.dataset.run, l.dataset.points]);" % kind)
    return {(tag, run): json.loads(points) for tag, run, points in lines}


def browser():
    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1400,1000"):
        options.add_argument(flag)
    return webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)


def open_board(driver, logdir):
    """A weft board on logdir, its page loaded in driver; returns the process."""
    board = subprocess.Popen([weft, "board", "--logdir", logdir, "--port", "0"], stdout=subprocess.PIPE, text=True)
    ready = board.stdout.readline()
    print(ready.strip())
    driver.get("http://" + re.search(r"http://([0-9.]+:[0-9]+)", ready).group(1) + "/")
    WebDriverWait(driver, 30).until(
        lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-ready") == "true")
    return board


def legend(driver):
    # One script, so that a refresh redrawing the legend cannot come between finding and reading.
    return driver.execute_script("return [...document.querySelectorAll('#legend > span')].map(e => e.dataset.run);")


with tempfile.TemporaryDirectory() as tmp:
    logdir = tmp + "/runs"
    # "once" evaluates only at its end, as a GPT run does: its test/loss is one point.
    for name, args in (("first", ["--lr", "0.05", "--eval-every", "6"]),
                       ("nested/second", ["--lr", "0.2", "--eval-every", "6"]), ("once", ["--lr", "0.1"])):
        subprocess.run([weft, "train", "--threads", "1", "--model", "mlp", "--steps", "12", "--log-every", "2",
                        *args, "--out", logdir + "/" + name], check=True, capture_output=True)
    expected = {}
    for name in ("first", "nested/second", "once"):
        files = glob.glob(logdir + "/" + name + "/**/events.out.tfevents.*", recursive=True)
        check(len(files) == 1, name + ": weft train wrote one event file")
        for tag, points in scalars(files[0]).items():
            expected[(tag, os.path.relpath(os.path.dirname(files[0]), logdir))] = points
    once = [(tag, points) for (tag, run), points in expected.items() if run == "once" and len(points) == 1]
    check(sorted(tag for tag, _ in once) == ["test/accuracy", "test/loss"],
          "the run that evaluated once has one point of test/loss and test/accuracy: %s" % once)
    # A run whose loss diverged: two finite points, then NaN and infinity.
    os.makedirs(logdir + "/diverged")
    write_scalars(logdir + "/diverged/events.out.tfevents.1.test.1.0", "train/loss",
                  [(2, 2.0), (4, 1.5), (6, float("nan")), (8, float("inf"))])
    # A run whose only event file is the first run's with a byte of a record's payload changed.
    os.makedirs(logdir + "/corrupt")
    whole = bytearray(open(glob.glob(logdir + "/first/**/events.out.tfevents.*", recursive=True)[0], "rb").read())
    whole[-6] ^= 0xFF
    open(logdir + "/corrupt/events.out.tfevents.1.test.1.0", "wb").write(whole)

    driver = browser()
    board = None
    try:
        board = open_board(driver, logdir)
        check(driver.title == "weft board", "the page loads")
        driver.save_screenshot("board_in_a_browser.png")
        print("screenshot: " + os.path.abspath("board_in_a_browser.png"))
        raw = plotted(driver, "raw")
        check(len(expected) >= 4 and len({run for _, run in expected}) == 3,
              "the event files hold several tags of three runs: %s" % sorted(expected))
        check({k: v for k, v in raw.items() if k[1] not in ("diverged", "corrupt")} == expected,
              "every raw point plotted is the event files' [step, value], for every tag of the three runs")
        first = {tag: points for (tag, run), points in expected.items() if run == "first"}
        cut = {tag: points for (tag, run), points in raw.items() if run == "corrupt"}
        check(all(points == first[tag][:len(points)] for tag, points in cut.items())
              and sum(map(len, cut.values())) == sum(map(len, first.values())) - 1,
              "the corrupt copy of the first run plots every point but its last record's")
        check(raw.get(("train/loss", "diverged")) == [[2, 2.0], [4, 1.5]], "the diverged run's finite points are drawn")
        notes = {c.get_attribute("data-tag"): c.find_element(By.CSS_SELECTOR, ".nonfinite").text
                 for c in driver.find_elements(By.CSS_SELECTOR, ".chart")
                 if c.find_elements(By.CSS_SELECTOR, ".nonfinite")}
        check(notes == {"train/loss": "not drawn: diverged step 6: NaN, diverged step 8: +inf"},
              "NaN and infinity are named under their chart: %s" % notes)

        ticks = axes(driver)
        markers = driver.execute_script(
            "return [...document.querySelectorAll('circle.marker')].map(m => [m.closest('.chart').dataset.tag,"
            " m.dataset.run, Number(m.dataset.step), Number(m.dataset.value), Number(m.getAttribute('cx')),"
            " Number(m.getAttribute('cy'))]);")
        # The corrupt copy's test/loss lost its second point with the bad record: one point too.
        check(sorted((tag, run) for tag, run, *_ in markers)
              == [("test/accuracy", "once"), ("test/loss", "corrupt"), ("test/loss", "once")],
              "each one-point series, and only those, is drawn as a marker: %s" % markers)
        markers = [m for m in markers if m[1] != "corrupt"]
        for tag, run, step, value, cx, cy in markers:
            (point,) = expected[(tag, run)]
            (v0, _, p0), (v1, _, p1) = ticks[tag]["y"][:2]
            (s0, _, q0), (s1, _, q1) = ticks[tag]["x"][:2]
            check([step, value] == point and abs(cy - (p0 + (value - v0) * (p1 - p0) / (v1 - v0))) < 0.5
                  and abs(cx - (q0 + (step - s0) * (q1 - q0) / (s1 - s0))) < 0.5,
                  "%s's marker on %s is at step %s, value %s, where the axes put them" % (run, tag, point[0], point[1]))
        for tag, by_axis in sorted(ticks.items()):
            for axis, marks in sorted(by_axis.items()):
                values = [v for v, _, _ in marks]
                scale = 1024 ** ["B", "KiB", "MiB", "GiB", "TiB"].index(marks[0][1].split(" ")[1]) \
                    if tag.endswith("_bytes") and axis == "y" else 1
                steps = {round((b - a) / scale, 12) for a, b in zip(values, values[1:])}
                check(len(marks) >= 3 and len(steps) == 1 and nice(steps.pop()),
                      "%s, %s axis: %d ticks a 1, 2 or 5 x 10^k apart: %s" % (tag, axis, len(marks), values))
                check(all(number(label) is not None and abs(number(label) - v) <= 1e-9 * max(1, abs(v))
                          for v, label, _ in marks),
                      "%s, %s axis: the labels read back as the ticks' values: %s"
                      % (tag, axis, [label for _, label, _ in marks]))
        for tag in ("memory/allocated_bytes", "memory/reserved_bytes"):
            labels = [label for _, label, _ in ticks[tag]["y"]]
            largest = max(v for (t, _), points in expected.items() if t == tag for _, v in points)
            unit = labels[-1].split(" ")[-1]
            check(len({label.split(" ")[-1] for label in labels}) == 1
                  and 1 <= largest / 1024 ** ["B", "KiB", "MiB", "GiB", "TiB"].index(unit) < 1024,
                  "%s is labelled in the unit of its largest value (%d bytes): %s" % (tag, largest, labels))

        runs = legend(driver)
        check(sorted(runs) == sorted({run for _, run in expected} | {"diverged", "corrupt"}),
              "the legend names the five runs: %s" % runs)
        groups = driver.execute_script(
            "return [...document.querySelectorAll('section.group')].map(g => [g.dataset.group,"
            " [...g.querySelectorAll('.chart')].map(c => c.dataset.tag)]);")
        check([g for g, _ in groups] == ["memory", "test", "train"]
              and all(tag.startswith(g + "/") for g, tags in groups for tag in tags)
              and sum(len(tags) for _, tags in groups) == len({tag for tag, _ in expected}),
              "the charts are grouped by their tag's first component: %s" % groups)
        driver.find_element(By.CSS_SELECTOR, '#legend > span[data-run="first"]').click()
        check("first" not in {run for _, run in plotted(driver, "raw")} and len(legend(driver)) == 5,
              "clicking a run in the legend hides its lines and keeps it in the legend")
        driver.find_element(By.CSS_SELECTOR, '#legend > span[data-run="first"]').click()
        check(plotted(driver, "raw") == raw, "clicking it again shows them")
        skipped = [e.text for e in driver.find_elements(By.CSS_SELECTOR, "#skipped li")]
        check(len(skipped) == 1 and skipped[0].startswith("skipped corrupt/events.out.tfevents.1.test.1.0: ")
              and "CRC-32C does not match" in skipped[0] and skipped[0].endswith("the records before it are plotted"),
              "the corrupt file is named, with why: %s" % skipped)
        controls = driver.execute_script(
            "const r = id => document.getElementById(id).getBoundingClientRect();"
            "return [r('smoothing-value').right, r('status').left];")
        check(controls[0] < controls[1], "the smoothing value ends before the status text begins: %s" % controls)
        smoothed_before = plotted(driver, "smoothed")
        driver.execute_script("const s = document.getElementById('smoothing'); s.value = '0';"
                              "s.dispatchEvent(new Event('input'));")
        check(plotted(driver, "smoothed") == raw, "with smoothing 0 the smoothed line is the raw one")
        driver.execute_script("const s = document.getElementById('smoothing'); s.value = '0.95';"
                              "s.dispatchEvent(new Event('input'));")
        smoothed_after = plotted(driver, "smoothed")
        check(smoothed_after != smoothed_before and smoothed_after != raw,
              "moving the slider changes the smoothed lines")
        check(plotted(driver, "raw") == raw, "and leaves the raw points as they were")
        # A refresh while the mouse is over a chart keeps its hover line; leaving the chart draws.
        page = driver.find_element(By.TAG_NAME, "body")
        ActionChains(driver).move_to_element(driver.find_element(By.CSS_SELECTOR, ".chart svg")).perform()
        drawn, fetched = page.get_attribute("data-refreshes"), int(page.get_attribute("data-fetches"))
        WebDriverWait(driver, 30).until(lambda d: int(page.get_attribute("data-fetches")) > fetched)
        hover = driver.find_element(By.CSS_SELECTOR, ".chart .hover").text
        check(hover.count("step ") >= 1 and page.get_attribute("data-refreshes") == drawn,
              "a refresh while hovering keeps the hover: %r" % hover)
        ActionChains(driver).move_to_element(driver.find_element(By.TAG_NAME, "h1")).perform()
        check(page.get_attribute("data-refreshes") != drawn, "leaving the chart draws what came meanwhile")
        # The page refreshes by itself from the files: a new run appears without reloading.
        subprocess.run([weft, "train", "--threads", "1", "--model", "mlp", "--steps", "3",
                        "--out", logdir + "/third"], check=True, capture_output=True)
        WebDriverWait(driver, 30).until(lambda d: len(legend(d)) == 6)
        check(True, "a run started after the page loaded appears on the next refresh")
        board.terminate()
        board.wait()

        # --logdir straight at a run: named after its directory, not ".".
        board = open_board(driver, logdir + "/nested/second")
        check(legend(driver) == ["second"], "a --logdir that is itself a run is named after it: %s" % legend(driver))
        board.terminate()
        board.wait()

        # A run whose event file holds no scalars yet: the page says so instead of staying blank.
        os.makedirs(tmp + "/starting")
        open(tmp + "/starting/events.out.tfevents.1.test.1.0", "wb").close()
        board = open_board(driver, tmp + "/starting")
        empty = driver.find_element(By.ID, "empty")
        check(empty.is_displayed() and empty.text.startswith("No scalars under "),
              "an empty board says so: %r" % empty.text)
    finally:
        driver.quit()
        if board:
            board.terminate()
            board.wait()

sys.exit(1 if failures else 0)
