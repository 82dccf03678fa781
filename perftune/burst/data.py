"""The dataset pipeline every workload is fed through, so the data knobs act the same on all of them.

source (NumPy slices or a MindRecord file) -> map(preprocess) -> batch -> repeat.  The order is fixed (no shuffle:
the workload pre-shuffles with its seed), so two trials see the same samples in the same order and an exact loss
match is a usable correctness check.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

import numpy as np

from perftune.workloads.base import Workload


def columns_digest(columns: dict[str, np.ndarray]) -> str:
    h = hashlib.sha256()
    for name, arr in columns.items():
        h.update(name.encode())
        h.update(str(arr.dtype).encode())
        h.update(str(arr.shape).encode())
        h.update(np.ascontiguousarray(arr).tobytes())
    return h.hexdigest()[:16]


def mindrecord_file(columns: dict[str, np.ndarray], cache_dir: Path, name: str) -> tuple[Path, bool]:
    """Write the columns to a MindRecord file once per distinct dataset; returns (path, written_now)."""
    from mindspore.mindrecord import FileWriter

    folder = cache_dir / "mindrecord" / f"{name}-{columns_digest(columns)}"
    path = folder / "data.mindrecord"
    if path.exists() and (folder / "COMPLETE").exists():
        return path, False
    tmp = folder.with_name(folder.name + f".tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    schema = {}
    for col, arr in columns.items():
        kind = "int32" if arr.dtype.kind in "iu" else "float32"
        schema[col] = {"type": kind, "shape": list(arr.shape[1:])}
    writer = FileWriter(str(tmp / "data.mindrecord"), shard_num=1, overwrite=True)
    writer.add_schema(schema, name)
    n = len(next(iter(columns.values())))
    chunk = 1024
    for start in range(0, n, chunk):
        rows = [
            {col: (arr[i].astype(np.int32) if arr.dtype.kind in "iu" else arr[i].astype(np.float32))
             for col, arr in columns.items()}
            for i in range(start, min(n, start + chunk))
        ]
        writer.write_raw_data(rows)
    writer.commit()
    (tmp / "COMPLETE").write_text("ok\n")
    try:
        os.replace(tmp, folder)
    except OSError:  # another process won the race: use its file
        shutil.rmtree(tmp, ignore_errors=True)
    return path, True


def build_dataset(workload: Workload, knobs: dict, split: str, cache_dir: Path | None, repeat: bool = True,
                  batch_size: int | None = None, num_shards: int = 1, shard_id: int = 0):
    """``num_shards > 1`` (distributed bursts): this rank reads rows ``shard_id, shard_id + num_shards, ...``
    (NumPy source; MindDataset shards its own way), so with ``batch_size = global batch / num_shards`` the ranks'
    batches of step ``j`` together hold the global batch ``j`` of a one-process run."""
    import mindspore.dataset as ds

    shard = {"num_shards": num_shards, "shard_id": shard_id} if num_shards > 1 else {}

    columns = workload.train_columns if split == "train" else workload.val_columns
    names = list(columns)
    workers = int(knobs["num_parallel_workers"])
    if knobs["dataset_format"] == "mindrecord":
        if cache_dir is None:
            raise ValueError("dataset_format=mindrecord needs a cache folder")
        path, _ = mindrecord_file(columns, cache_dir, f"{workload.name}-{split}")
        dataset = ds.MindDataset(str(path), columns_list=names, shuffle=False, num_parallel_workers=workers,
                                 **shard)
    else:
        dataset = ds.NumpySlicesDataset(tuple(columns[n] for n in names), column_names=names, shuffle=False,
                                        **shard)
    if workload.preprocess is not None and split == "train":
        dataset = dataset.map(
            operations=workload.preprocess,
            input_columns=names,
            output_columns=names,
            num_parallel_workers=workers,
            python_multiprocessing=bool(knobs["python_multiprocessing"]),
        )
    dataset = dataset.batch(
        batch_size or int(knobs["batch_size"]),
        drop_remainder=bool(knobs["drop_remainder"]) if split == "train" else True,
        num_parallel_workers=workers,
    )
    if repeat:
        dataset = dataset.repeat()
    return dataset
