#!/usr/bin/python3
"""weft board in a real browser (Debian's chromium, chromium-driver, python3-selenium): for two
training runs and a third run whose event file is corrupt, every raw point the page plots is the
value the event files hold (read here by a decoder of their own), a corrupt file is shown as skipped
with the reader's reason while the other runs plot, and the smoothing slider moves the smoothed
lines but not the raw points.

Usage: board_test.py WEFT"""
import glob
import json
import os
import re
import struct
import subprocess
import sys
import tempfile

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
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


def plotted(driver, kind):
    """{(tag, run): [[step, value]]} of the page's polylines of one kind."""
    lines = driver.execute_script(
        "return [...document.querySelectorAll('polyline.%s')].map(l => [l.closest('.chart').dataset.tag,"
        " l.dataset.run, l.dataset.points]);" % kind)
    return {(tag, run): json.loads(points) for tag, run, points in lines}


with tempfile.TemporaryDirectory() as tmp:
    logdir = tmp + "/runs"
    for name, lr in (("first", "0.05"), ("nested/second", "0.2")):
        subprocess.run([weft, "train", "--threads", "1", "--model", "mlp", "--steps", "12", "--lr", lr,
                        "--log-every", "2", "--eval-every", "6", "--out", logdir + "/" + name],
                       check=True, capture_output=True)
    expected = {}
    for name in ("first", "nested/second"):
        files = glob.glob(logdir + "/" + name + "/**/events.out.tfevents.*", recursive=True)
        check(len(files) == 1, name + ": weft train wrote one event file")
        for tag, points in scalars(files[0]).items():
            expected[(tag, os.path.relpath(os.path.dirname(files[0]), logdir))] = points
    # A third run whose only event file is the first run's with a byte of a record's payload changed.
    os.makedirs(logdir + "/corrupt")
    whole = bytearray(open(glob.glob(logdir + "/first/**/events.out.tfevents.*", recursive=True)[0], "rb").read())
    whole[-6] ^= 0xFF
    open(logdir + "/corrupt/events.out.tfevents.1.test.1.0", "wb").write(whole)

    board = subprocess.Popen([weft, "board", "--logdir", logdir, "--port", "0"], stdout=subprocess.PIPE, text=True)
    ready = board.stdout.readline()
    print(ready.strip())
    url = "http://" + re.search(r"http://([0-9.]+:[0-9]+)", ready).group(1)
    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1400,1000"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
    try:
        driver.get(url + "/")
        WebDriverWait(driver, 30).until(
            lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-ready") == "true")
        check(driver.title == "weft board", "the page loads")
        raw = plotted(driver, "raw")
        check(len(expected) >= 4 and len({run for _, run in expected}) == 2,
              "the event files hold several tags of two runs: %s" % sorted(expected))
        check(raw == expected, "every raw point plotted is the event files' [step, value], for every tag of both runs")
        runs = [e.get_attribute("data-run") for e in driver.find_elements(By.CSS_SELECTOR, "#legend span")]
        check(sorted(runs) == sorted({run for _, run in expected}), "the legend names the two runs: %s" % runs)
        skipped = [e.text for e in driver.find_elements(By.CSS_SELECTOR, "#skipped li")]
        check(len(skipped) == 1 and skipped[0].startswith("skipped corrupt/events.out.tfevents.1.test.1.0: ")
              and "CRC-32C does not match" in skipped[0], "the corrupt file is shown as skipped, with why: %s" % skipped)
        smoothed_before = plotted(driver, "smoothed")
        driver.execute_script("const s = document.getElementById('smoothing'); s.value = '0';"
                              "s.dispatchEvent(new Event('input'));")
        check(plotted(driver, "smoothed") == raw, "with smoothing 0 the smoothed line is the raw one")
        driver.execute_script("const s = document.getElementById('smoothing'); s.value = '0.95';"
                              "s.dispatchEvent(new Event('input'));")
        smoothed_after = plotted(driver, "smoothed")
        check(smoothed_after != smoothed_before and smoothed_after != raw,
              "moving the slider changes the smoothed lines")
        check(plotted(driver, "raw") == expected, "and leaves the raw points as they were")
        # The page refreshes by itself from the files: a new run appears without reloading.
        subprocess.run([weft, "train", "--threads", "1", "--model", "mlp", "--steps", "3",
                        "--out", logdir + "/third"], check=True, capture_output=True)
        WebDriverWait(driver, 30).until(
            lambda d: len(d.find_elements(By.CSS_SELECTOR, "#legend span")) == 3)
        check(True, "a run started after the page loaded appears on the next refresh")
    finally:
        driver.quit()
        board.terminate()
        board.wait()

sys.exit(1 if failures else 0)
