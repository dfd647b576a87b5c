# weft serve under load, side by side in one run (needs Debian's wrk: scripts/setup --bench).
#
# The CNN: wrk keeps 64 connections busy for DURATION seconds, each request one image, against
# the server at --max-batch 1 (every request its own forward) and --max-batch 32 (dynamic
# batching, --max-wait-ms 5): requests/s and the p50 / p99 latency wrk measured.
# The GPT: tokens/s for one completion stream alone, and for 8 streams at once (continuous
# batching: the 8 decode together). A stream is a client asking for ROUNDS completions of TOKENS
# tokens one after the other, so that what is timed is mostly streams decoding side by side, not
# the first admissions and the last sequence finishing alone.
#
#   python3 bench/serve_load.py build/weft         (DURATION=10, TOKENS=100, ROUNDS=5 by default)
#
# The checkpoints are made here with one training step each (what is measured is the serving, not
# the model's quality). The server computes on one thread (--threads 1): at these models' sizes
# each op is too small to split, and waking a second OpenMP thread for every op cost more than it
# saved (docs/serving.md has both measured); wrk, the clients and the HTTP workers share the two
# cores with it.
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

DURATION = os.environ.get("DURATION", "10")
TOKENS = int(os.environ.get("TOKENS", "100"))
ROUNDS = int(os.environ.get("ROUNDS", "5"))
HERE = os.path.dirname(os.path.abspath(__file__))


def checkpoint(weft, model, out):
    subprocess.run([weft, "train", "--model", model, "--steps", "1", "--out", out], check=True, capture_output=True)
    return out


class Server:
    def __init__(self, weft, checkpoint, *flags):
        self.process = subprocess.Popen([weft, "serve", "--checkpoint", checkpoint, "--port", "0", "--threads", "1", *flags],
                                        stdout=subprocess.PIPE, text=True)
        line = self.process.stdout.readline()
        self.url = "http://" + re.search(r"http://([0-9.]+:[0-9]+)", line).group(1)

    def stop(self):
        self.process.terminate()
        self.process.wait()


def wrk(url):
    out = subprocess.run(["wrk", "-t2", "-c64", "-d" + DURATION + "s", "--latency", "-s",
                          os.path.join(HERE, "serve_predict.lua"), url + "/v1/predict"],
                         capture_output=True, text=True, check=True).stdout
    per_s = float(re.search(r"Requests/sec:\s+([0-9.]+)", out).group(1))
    def percentile(p):
        value, unit = re.search(r"\s%s%%\s+([0-9.]+)(us|ms|s)" % p, out).groups()
        return float(value) * {"us": 1e-3, "ms": 1, "s": 1e3}[unit]
    failed = int(re.search(r"non-200: (\d+)", out).group(1))
    return per_s, percentile(50), percentile(99), failed


def complete(url, seed):
    body = json.dumps({"prompt": "The ", "max_tokens": TOKENS, "temperature": 1.0, "seed": seed}).encode()
    request = urllib.request.Request(url + "/v1/completions", data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request) as r:
        return json.loads(r.read())["completion_tokens"]


def streams(url, n):
    counts = [0] * n
    def one(i):
        counts[i] = sum(complete(url, i * ROUNDS + r) for r in range(ROUNDS))
    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(counts) / (time.perf_counter() - start)


def main():
    weft = sys.argv[1] if len(sys.argv) > 1 else "build/weft"
    with tempfile.TemporaryDirectory() as tmp:
        cnn = checkpoint(weft, "cnn", os.path.join(tmp, "cnn"))
        gpt = checkpoint(weft, "gpt", os.path.join(tmp, "gpt"))
        print(f"CNN, /v1/predict of one image, 64 connections for {DURATION} s (wrk)")
        print(f"{'':<26}{'requests/s':>12}{'p50 ms':>9}{'p99 ms':>9}{'non-200':>9}")
        rates = {}
        for max_batch in ("1", "32"):
            server = Server(weft, cnn, "--max-batch", max_batch, "--max-wait-ms", "5")
            try:
                per_s, p50, p99, failed = wrk(server.url)
            finally:
                server.stop()
            rates[max_batch] = per_s
            print(f"{'--max-batch ' + max_batch:<26}{per_s:>12.0f}{p50:>9.1f}{p99:>9.1f}{failed:>9}")
        print(f"batching: {rates['32'] / rates['1']:.1f}x the requests/s of --max-batch 1")
        print(f"\nGPT (weft train's default), streams of {ROUNDS} /v1/completions of {TOKENS} tokens each")
        server = Server(weft, gpt, "--max-batch", "8")
        try:
            streams(server.url, 1)  # warm-up
            alone, together = streams(server.url, 1), streams(server.url, 8)
        finally:
            server.stop()
        print(f"{'1 stream':<26}{alone:>12.0f} tokens/s")
        print(f"{'8 streams at once':<26}{together:>12.0f} tokens/s")
        print(f"continuous batching: {together / alone:.1f}x the tokens/s of one stream")


if __name__ == "__main__":
    main()
