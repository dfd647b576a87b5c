"""weft.train: the trainer every ``weft train`` runs, for a model defined in Python.

``fit(model, "fashion-mnist", epochs=3, out="runs/cnn")`` is ``weft train --epochs 3 --out runs/cnn``
with ``model`` in place of weft's own: the same data loading, optimizer, schedule, precision,
accumulation, auto-batch, evaluation, checkpoints, logs and profiler, and data parallelism when
the script runs under ``mpirun``. Its parameters are trained in place.
"""
from . import _weft

DATASETS = ("fashion-mnist", "mnist")
rank, world_size = _weft.train.rank, _weft.train.world_size
def _flags(**options):
    """``weft train``'s command-line arguments for keyword options: ``batch_size=64`` is
    ``--batch-size 64``; True turns a switch on (``auto_batch=True``), False and None leave it out."""
    args = []
    for key, value in options.items():
        if key == "json":
            raise TypeError("fit() takes no 'json' option: it returns the result")
        flag = "--" + key.replace("_", "-")
        if value is True:
            args.append(flag)
        elif value is not False and value is not None:
            args += [flag, str(value)]
    return args


def fit(model, data="fashion-mnist", *, log=True, **options):
    """Trains ``model`` (a ``weft.nn.Module`` whose forward takes a batch of inputs and returns
    logits [N, classes]) on ``data`` with the trainer of ``weft train``. ``data`` is one of
    ``DATASETS`` (images [N, 1, 28, 28], 10 classes) or, as ``weft train --data`` takes it, a folder
    of images with one subfolder per class (PNG, JPEG; images [N, C, H, W]) or a CSV table (rows of
    features [N, F]); ``image_size``, ``channels``, ``normalize``, ``label_column`` and
    ``val_fraction`` say how to read it.

    ``options`` are ``weft train``'s flags as keywords, dashes as underscores (``weft train --help``
    lists them): ``epochs``, ``steps``, ``batch_size``, ``optimizer``, ``lr``, ``schedule``,
    ``precision``, ``grad_accum``, ``auto_batch``, ``out``, ``resume``, ``init_from``, ``freeze``,
    ``profile``, ``seed``, ``threads``, ... A value it cannot take raises ValueError with the
    command's message, which names the flag. ``log=False`` prints nothing.

    Returns the run's result, the object ``weft train --json`` prints: steps, loss, samples per
    second, test accuracy, the allocator's peak, and with ``profile`` the per-op table.
    """
    source = ["--dataset", data] if data in DATASETS else ["--data", str(data)]
    # --model only picks the task here (the classifiers'): mlp's takes tables as well as images.
    return _weft.train.fit(model, ["--model", "mlp"] + source + _flags(**options), log)
