#!/usr/bin/python3
"""weft serve's playground in a real browser (Debian's chromium, chromium-driver, python3-selenium):
the page loads with every control labelled and an empty state where the answers will go, a test
image picked and an image drawn on the canvas each show the probabilities the API gives for the
same pixels, and a prompt's streamed completion ends as the API's text. Screenshots of each state go
to the working directory (ctest's: the build directory).

Usage: playground_test.py WEFT"""
import json
import os
import re
import subprocess
import sys
import tempfile
import urllib.request

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


def post(url, body):
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request) as r:
        return json.loads(r.read())


def screenshot(driver, name):
    driver.save_screenshot(name)
    print("screenshot: " + os.path.abspath(name))


def placeholder(driver, element_id):
    """The empty-state text shown in place of an answer not there yet."""
    return driver.execute_script(
        "const e = document.getElementById(arguments[0]);"
        "return e.textContent === '' ? getComputedStyle(e, '::before').content : '';", element_id)


def same_bars(driver, url, what):
    """The bars the page rendered against the API's answer for the pixels the page sent."""
    WebDriverWait(driver, 30).until(lambda d: d.find_element(By.ID, "bars").get_attribute("data-done") == "true")
    pixels = driver.execute_script("return window.lastPixels;")
    bars = driver.find_elements(By.CSS_SELECTOR, "#bars .bar")
    shown = [(int(b.get_attribute("data-label")), b.find_element(By.CSS_SELECTOR, ".value").text) for b in bars]
    api = post(url + "/v1/predict", {"model": "mlp", "inputs": [pixels]})["predictions"][0]["probabilities"]
    check(len(pixels) == 784 and all(0 <= p <= 255 for p in pixels), what + ": the page sent 784 pixels 0-255")
    check(shown == [(i, f"{p:.4f}") for i, p in enumerate(api)], what + ": the bars are the API's probabilities")
    return pixels


with tempfile.TemporaryDirectory() as tmp:
    for args in (["--model", "mlp", "--steps", "20", "--out", tmp + "/mlp"],
                 ["--model", "gpt", "--layers", "1", "--heads", "2", "--dim", "32", "--context", "64", "--steps", "2",
                  "--out", tmp + "/gpt"]):
        subprocess.run([weft, "train", "--threads", "1", *args], check=True, capture_output=True)
    server = subprocess.Popen([weft, "serve", "--checkpoint", tmp + "/mlp", "--checkpoint", "lm=" + tmp + "/gpt",
                               "--port", "0", "--threads", "1"], stdout=subprocess.PIPE, text=True)
    url = "http://" + re.search(r"http://([0-9.]+:[0-9]+)", server.stdout.readline()).group(1)
    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1200,1000"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
    try:
        driver.get(url + "/")
        WebDriverWait(driver, 30).until(lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-ready") == "true")
        check(driver.title == "weft playground", "the page loads")
        unlabelled = driver.execute_script(
            "return [...document.querySelectorAll('input, select, textarea')].filter(e => !e.labels.length"
            " || !e.labels[0].textContent.trim()).map(e => e.id);")
        check(unlabelled == [], "every input has a label: unlabelled %s" % unlabelled)
        WebDriverWait(driver, 30).until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "#examples canvas")) == 20)
        check("No prediction yet" in placeholder(driver, "bars"), "before a prediction, the bars' place says so")
        screenshot(driver, "playground_empty.png")
        # A test image: its pixels are the data set's, and the bars the API's.
        driver.find_elements(By.CSS_SELECTOR, "#examples canvas")[7].click()
        picked = same_bars(driver, url, "a test image")
        examples = json.loads(urllib.request.urlopen(url + "/v1/examples?model=mlp").read())
        check(picked == examples["images"][7], "the picked image is the test image, pixel for pixel")
        screenshot(driver, "playground_classifier.png")
        # A drawing: a stroke across the canvas.
        driver.find_element(By.ID, "clear").click()
        driver.execute_script("document.getElementById('bars').removeAttribute('data-done');")
        canvas = driver.find_element(By.ID, "canvas")
        ActionChains(driver).move_to_element_with_offset(canvas, -80, -100).click_and_hold() \
            .move_by_offset(60, 80).move_by_offset(60, 80).move_by_offset(40, 20).release().perform()
        driver.find_element(By.ID, "predict").click()
        drawn = same_bars(driver, url, "a drawing")
        check(sum(p > 0 for p in drawn) > 20, "the stroke shows in the pixels sent")
        # The GPT: the streamed text ends as the API's completion for the same request.
        from selenium.webdriver.support.select import Select
        Select(driver.find_element(By.ID, "model")).select_by_value("lm")
        check("No completion yet" in placeholder(driver, "completion"), "before a completion, its place says so")
        screenshot(driver, "playground_gpt_empty.png")
        prompt = driver.find_element(By.ID, "prompt")
        prompt.clear()
        prompt.send_keys("Hello")
        for field, value in (("max_tokens", "20"), ("temperature", "0.9"), ("seed", "7")):
            element = driver.find_element(By.ID, field)
            element.clear()
            element.send_keys(value)
        driver.find_element(By.ID, "generate").click()
        WebDriverWait(driver, 30).until(lambda d: d.find_element(By.ID, "completion").get_attribute("data-done") == "true")
        shown = driver.execute_script("return document.getElementById('completion').textContent;")
        api = post(url + "/v1/completions", {"model": "lm", "prompt": "Hello", "max_tokens": 20, "temperature": 0.9,
                                             "seed": 7})
        check(shown == api["text"], "the streamed completion is the API's text")
        check(driver.find_element(By.ID, "counts").text == "5 prompt tokens, 20 generated", "the counts are shown")
        check(driver.find_element(By.ID, "error").text == "", "no error shown")
        screenshot(driver, "playground_gpt.png")
    finally:
        driver.quit()
        server.terminate()
        server.wait()

sys.exit(1 if failures else 0)
