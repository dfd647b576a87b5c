# MLP inference, weft against PyTorch 1.13 in the same run: f32, and int8 with activation scales
# measured per batch (weft's DynamicQuantizedLinear vs torch.ao.quantization.quantize_dynamic,
# fbgemm), plus weft's static int8 and int4 weight-only, at batch 128 and batch 1.
#
#   OPENBLAS_NUM_THREADS=1 OPENBLAS_CORETYPE=SkylakeX /usr/bin/python3 bench/mlp_inference_vs_pytorch.py build
#
# PyTorch gets its best configuration: 2 intra-op threads (Debian's build defaults to 1), OpenBLAS
# pinned to one thread and to its AVX-512 kernels, and for each figure the faster of no_grad and
# inference_mode (Debian's 1.13 runs f32 Linear about 8x slower under inference_mode) and, for
# int8, the faster of its quantized engines (this build has onednn and qnnpack, no fbgemm). Both
# sides time one forward of the same shapes the same way (median microseconds over many calls
# after a warm-up).
import json
import os
import subprocess
import sys
import contextlib
import time

import torch

REPS = {128: 200, 1: 2000}


@contextlib.contextmanager
def quiet_stderr():
    """qnnpack's dynamic Linear writes a warning to stderr on every call (it ignores the
    reduce_range that torch's Linear always passes), from C++, so only fd 2 itself can hush it."""
    sys.stderr.flush()
    saved = os.dup(2)
    with open(os.devnull, "w") as null:
        os.dup2(null.fileno(), 2)
    try:
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def median_us(model, x, reps, mode):
    with mode(), quiet_stderr():
        for _ in range(10):
            model(x)
        times = []
        for _ in range(reps):
            t0 = time.perf_counter()
            model(x)
            times.append((time.perf_counter() - t0) * 1e6)
    times.sort()
    return times[len(times) // 2]


def best_us(models, x, reps):
    """The fastest (median us, label) over the (label, model) pairs and both grad modes."""
    return min((median_us(model, x, reps, mode), f"{label}{name}") for label, model in models
               for name, mode in ((" no_grad", torch.no_grad), (" inference_mode", torch.inference_mode)))


def main():
    build = sys.argv[1] if len(sys.argv) > 1 else "build"
    weft_out = subprocess.run([os.path.join(build, "bench", "bench_mlp_inference"), "--json"], check=True,
                              capture_output=True, text=True).stdout
    weft = {(r["variant"], r["batch"]): r["median_us"] for r in json.loads(weft_out.strip().splitlines()[-1])["results"]}

    torch.set_num_threads(2)
    torch.manual_seed(0)
    nn = torch.nn
    f32 = nn.Sequential(nn.Flatten(), nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 256), nn.ReLU(),
                        nn.Linear(256, 10)).eval()
    int8 = []
    for engine in torch.backends.quantized.supported_engines:
        if engine == "none":
            continue
        torch.backends.quantized.engine = engine
        int8.append((engine, torch.ao.quantization.quantize_dynamic(f32, {nn.Linear}, dtype=torch.qint8)))
    print("MLP 784-512-256-10 inference, 2 threads, median microseconds per forward "
          f"(torch {torch.__version__}, "
          f"OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS')}, "
          f"OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE')})")
    print(f"{'batch':>5} {'weft f32':>9} {'weft int8 dyn':>14} {'weft int8 static':>17} {'weft int4':>10} "
          f"{'torch f32':>10} {'torch int8 dyn':>15} | {'weft int8/f32':>13} {'torch int8/f32':>14} "
          f"{'weft/torch f32':>14} {'weft/torch int8 dyn':>19}")
    for batch in (128, 1):
        x = torch.randn(batch, 1, 28, 28)
        t_f32, how_f32 = best_us([("", f32)], x, REPS[batch])
        t_int8, how_int8 = best_us(int8, x, REPS[batch])
        w_f32, w_dyn = weft[("f32", batch)], weft[("int8 dynamic", batch)]
        w_static, w_int4 = weft[("int8 static", batch)], weft[("int4 weight-only", batch)]
        print(f"{batch:>5} {w_f32:9.1f} {w_dyn:14.1f} {w_static:17.1f} {w_int4:10.1f} {t_f32:10.1f} {t_int8:15.1f} | "
              f"{w_f32 / w_static:5.2f}x static {t_f32 / t_int8:13.2f}x {t_f32 / w_f32:13.2f}x {t_int8 / w_dyn:18.2f}x")
        print(f"{'':>5} {'':>9} {'':>14} {'':>17} {'':>10} {'':>10} {'':>15} | {w_f32 / w_dyn:5.2f}x dyn"
              f"   (torch f32:{how_f32}; torch int8: {how_int8})")
    print("speed-ups are f32 time / int8 time (higher is better); weft/torch is torch time / weft time. "
          "target: weft int8 >= 2x weft f32")


if __name__ == "__main__":
    main()
