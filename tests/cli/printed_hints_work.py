#!/usr/bin/python3
"""Every command weft train prints as advice runs when pasted as printed: the lines under
"checkpoint:" (evaluate or sample, merge a sharded checkpoint, continue or train on, see the logs),
the one a signal's stop prints, the one a --time-limit stop leads to, the one that refuses an --out
holding a run, the one weft generate prints for a sharded checkpoint, and the ones weft quantize and
weft tokenize encode print for their output. Each is run through a shell,
as a person pasting it would; `weft board` is run until it says it is serving.

Usage: printed_hints_work.py WEFT MPIEXEC"""
import glob
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

weft, mpiexec = sys.argv[1], sys.argv[2]
failures = []
TINY_GPT = "--model gpt --layers 1 --heads 2 --dim 32 --context 32 --batch-size 8 --eval-windows 16 --threads 1"


def check(condition, what, output=""):
    print(("ok: " if condition else "FAILED: ") + what)
    if not condition:
        failures.append(what)
        print(output[-3000:])


def run(command, **kwargs):
    return subprocess.run(command, shell=True, capture_output=True, text=True, errors="replace", timeout=300, **kwargs)


def hints(output):
    """The "  label: command" lines after "checkpoint:", as {label: command}."""
    found = {}
    after = output[output.find("\ncheckpoint: "):]
    for m in re.finditer(r"^  ([a-z ]+):\s+(\S.*)$", after, re.M):
        found[m.group(1)] = m.group(2)
    return found


def board_serves(command):
    board = subprocess.Popen(command, shell=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             start_new_session=True)
    try:
        line = board.stdout.readline()
    finally:
        os.killpg(board.pid, signal.SIGTERM)
        board.wait(timeout=30)
    return line


def check_hints(output, expected, what):
    found = hints(output)
    check(sorted(found) == sorted(expected), f"{what}: prints the hints {expected}, found {sorted(found)}", output)
    for label, command in found.items():
        if label == "logs":
            line = board_serves(command)
            check("weft board: 1 run under" in line, f"{what}: '{command}' serves the run's logs", line)
            continue
        r = run(command)
        check(r.returncode == 0, f"{what}: '{command}' runs", r.stdout + r.stderr)
    return found


os.chdir(tempfile.mkdtemp())
shell_weft = weft.replace("'", "'\\''")

# A classifier's run: evaluate, train on (its plan is done), logs.
r = run(f"'{shell_weft}' train --model mlp --steps 3 --batch-size 32 --threads 1 --out 'runs/an mlp'")
check(r.returncode == 0, "an mlp trains", r.stdout + r.stderr)
found = check_hints(r.stdout, ["evaluate", "train on", "logs"], "mlp")
check("--steps 6" in found.get("train on", ""), "mlp: training on doubles the steps", r.stdout)

# Its quantized copy: evaluated as the quantizer says.
r = run(f"'{shell_weft}' quantize --checkpoint 'runs/an mlp' --int8 --calib 1 --out 'runs/an mlp.int8.safetensors'")
m = re.search(r"\(evaluate with: (.+)\)$", r.stdout, re.M)
check(r.returncode == 0 and m is not None, "quantize names the command that evaluates its output", r.stdout + r.stderr)
if m:
    r = run(m.group(1))
    check(r.returncode == 0 and "accuracy" in r.stdout, f"'{m.group(1)}' runs", r.stdout + r.stderr)

# The same --out again: refused, naming the command that continues it, which works.
r = run(f"'{shell_weft}' train --model mlp --steps 3 --out 'runs/an mlp'")
m = re.search(r"continue it with (.+), or pass --overwrite", r.stderr)
check(r.returncode == 2 and m is not None, "an --out holding a run is refused, naming --resume and --overwrite",
      r.stdout + r.stderr)
if m:
    r = run(m.group(1) + " --steps 9")
    check(r.returncode == 0 and "resumed at step 6" in r.stdout, f"'{m.group(1)}' continues the run", r.stdout + r.stderr)

# Stopped by --time-limit before its plan: the continue hint takes it to the plan's end.
r = run(f"'{shell_weft}' train --model mlp --steps 100000 --batch-size 8 --threads 1 --time-limit 2 --out runs/timed")
check(r.returncode == 0 and "stopped by --time-limit" in r.stdout, "a time-limited run stops early", r.stdout + r.stderr)
continue_hint = hints(r.stdout).get("continue", "")
check(continue_hint.endswith("--resume runs/timed"), "a stopped run is continued, not trained on", r.stdout)

# Stopped by SIGTERM: the line it prints names the command that continues the run.
train = subprocess.Popen([weft, "train", "--model", "mlp", "--steps", "100000", "--batch-size", "8", "--threads", "1",
                          "--out", "runs/signalled"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
deadline = time.time() + 60
while not glob.glob("runs/signalled/events.out.tfevents.*") and time.time() < deadline:
    time.sleep(0.1)
time.sleep(1)
train.send_signal(signal.SIGTERM)
output = train.communicate(timeout=120)[0]
m = re.search(r"\(continue with (.+)\)$", output, re.M)
check(m is not None, "SIGTERM's line names the command that continues the run", output)
if m:
    # The plan is 100000 steps: continue it for a few, as the hint's command with a shorter plan.
    r = run(m.group(1) + " --time-limit 1")
    check(r.returncode == 0 and "resumed at step" in r.stdout, f"'{m.group(1)}' continues the run", r.stdout + r.stderr)

# Token shards: trained on as tokenize encode says.
with open("text.txt", "w") as f:
    f.write("The sea was calm that night, and the ship sailed on toward the harbour lights. " * 40)
r = run(f"'{shell_weft}' tokenize encode text.txt --out 'shards dir'")
m = re.search(r"^train on them: (.+)$", r.stdout, re.M)
check(r.returncode == 0 and m is not None, "tokenize encode names the command that trains on its shards",
      r.stdout + r.stderr)
if m:
    r = run(m.group(1) + " --layers 1 --heads 2 --dim 32 --context 32 --batch-size 8 --steps 2 --threads 1")
    check(r.returncode == 0, f"'{m.group(1)}' trains", r.stdout + r.stderr)

# A GPT's run: sample instead of evaluate.
r = run(f"'{shell_weft}' train {TINY_GPT} --steps 2 --out runs/gpt")
check(r.returncode == 0, "a GPT trains", r.stdout + r.stderr)
check_hints(r.stdout, ["sample", "train on", "logs"], "gpt")

# A sharded checkpoint (ZeRO-1 on 2 ranks): merge, sample the merged file, train on under mpirun.
r = run(f"{mpiexec} -np 2 --oversubscribe --bind-to none '{shell_weft}' train {TINY_GPT} --steps 2 --parallel zero1 "
        "--out runs/zero1")
check(r.returncode == 0, "ZeRO-1 on 2 ranks trains", r.stdout + r.stderr)
found = hints(r.stdout)
check(sorted(found) == ["logs", "merge", "sample", "train on"], f"zero1: merge, sample, train on, logs: {found}",
      r.stdout)
for label in ["merge", "sample", "train on"]:
    if label in found:
        r2 = run(found[label])
        check(r2.returncode == 0, f"zero1: '{found[label]}' runs", r2.stdout + r2.stderr)
        if label == "train on":
            check("ZeRO-1 on 2 ranks" in r2.stdout, "zero1: training on keeps the run's layout", r2.stdout)

# weft generate on the sharded directory itself: refused, naming the commands that work.
r = run(f"'{shell_weft}' generate --checkpoint runs/zero1 --prompt 'The '")
m = re.search(r"merge it into one file with (.+) and pass (\S+)$", r.stderr, re.M)
check(r.returncode == 2 and m is not None, "a sharded checkpoint's refusal names the merge", r.stderr)
if m:
    r = run(m.group(1))
    check(r.returncode == 0, f"'{m.group(1)}' runs", r.stdout + r.stderr)
    r = run(f"'{shell_weft}' generate --checkpoint {m.group(2)} --prompt 'The ' --max-tokens 4")
    check(r.returncode == 0, f"the merged {m.group(2)} samples", r.stdout + r.stderr)

print(f"{len(failures)} failed" if failures else "all hints ran")
sys.exit(1 if failures else 0)
