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


def fit(model, data=None, *, task=None, log=True, **options):
    """Trains ``model`` (a ``weft.nn.Module``) with the trainer of ``weft train`` and returns the
    run's result, the object ``weft train --json`` prints: steps, loss, samples per second, the
    evaluation, the allocator's peak, and with ``profile`` the per-op table.

    ``task`` is what the model does with ``data``:

    - ``"classify"`` (the default for any model but a GPT): its forward takes a batch of inputs and
      returns logits [N, classes]. ``data`` is one of ``DATASETS`` (images [N, 1, 28, 28], 10
      classes; the default is Fashion-MNIST) or, as ``weft train --data`` takes it, a folder of images
      with one subfolder per class (PNG, JPEG; images [N, C, H, W]) or a CSV table (rows of features
      [N, F]); ``image_size``, ``channels``, ``normalize``, ``label_column`` and ``val_fraction``
      say how to read it.
    - ``"language"`` (the default for a ``weft.nn.GPT``): its forward takes token ids i64 [B, T]
      and returns next-token logits [B, T, vocab]. ``data`` is what ``weft train --model gpt
      --data`` takes: text files, folders of .txt files, token shards of ``weft tokenize``, or
      ``"random"`` tokens (without ``data``: the fortunes). A ``weft.nn.GPT`` gives the windows'
      length and its shape itself, and its checkpoints are weft's GPT's, which ``weft generate``,
      ``weft serve`` and ``--init-from`` load; another model needs ``context`` (tokens per window) and
      ``vocab`` (its logits' width, at least the tokenizer's).

    ``options`` are ``weft train``'s flags as keywords, dashes as underscores (``weft train --help``
    lists them): ``epochs``, ``steps``, ``batch_size``, ``optimizer``, ``lr``, ``schedule``,
    ``precision``, ``grad_accum``, ``auto_batch``, ``out``, ``resume``, ``init_from``, ``freeze``,
    ``profile``, ``seed``, ``threads``, ... A value it cannot take raises ValueError with the
    command's message, which names the flag. ``log=False`` prints nothing. The model's parameters
    are trained in place.
    """
    from . import nn
    task = task or ("language" if isinstance(model, nn.GPT) else "classify")
    name = ""
    if task == "classify":
        # --model only picks the task here (the classifiers'): mlp's takes tables as well as images.
        args = ["--model", "mlp"]
        data = data or DATASETS[0]
        args += ["--dataset", data] if data in DATASETS else ["--data", str(data)]
    elif task == "language":
        args = ["--model", "gpt"] + (["--data", str(data)] if data else [])
        if isinstance(model, nn.GPT):
            shape = dict(layers=model.layers, heads=model.heads, dim=model.dim, context=model.context,
                         vocab=model.vocab, dropout=model.drop.p)
            clash = [k for k in shape if k in options and options[k] != shape[k]]
            if clash:
                raise ValueError(f"fit: {', '.join(clash)} given as options differ from the GPT's own {shape}")
            options = {**options, **shape}
            # weft's own GPT, layer for layer (tests/python/test_gpt.py): its checkpoints are that
            # model's. A subclass may compute something else, and keeps its own class's name.
            if type(model) is nn.GPT:
                name = "gpt"
        elif "context" not in options or "vocab" not in options:
            raise ValueError("fit: a language model other than weft.nn.GPT needs context= (tokens per window) "
                             "and vocab= (the width of its logits)")
    else:
        raise ValueError(f"fit: task must be 'classify' or 'language', got {task!r}")
    return _weft.train.fit(model, args + _flags(**options), log, name)
