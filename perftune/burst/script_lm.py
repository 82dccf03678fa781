"""The language-model view of a script burst: tokens/s and perplexity, as a ``build()`` workload gets them from
its ``tokens_per_sample``, without the script saying anything.

A script declares nothing, so its first training batch is read instead: the token ids are the column named like
token ids (``input_ids``, ``tokens``) or else the first integer column of shape (batch, sequence), and a sample's
tokens are that sequence dimension as it is (a model that shifts its labels inside, as mindformers' LLaMA does with
its ``seq_length + 1`` input, predicts one fewer).  The plan's ``workload.tokens_per_sample`` overrides it (0: not a
language model).

exp(loss) is a perplexity only for a mean token cross-entropy: declared (``workload.loss: token_cross_entropy``) or
recognised, where ``Model`` trains a network holding a cross-entropy cell on a batch with token ids and no
per-sample label column (a text classifier has one, and its loss is no perplexity).  A custom loop's loss cannot be
seen, so there it has to be declared.  The perplexity is exp(the script's validation loss) where it has one, else
exp(the accuracy window's training loss), and a note says which.
"""

from __future__ import annotations

import math
from typing import Any, Optional

from perftune.io.records import Accuracy, Note, TrialResult, TrialSpec

#: names of a batch column that holds token ids (dict batches), tried before the first integer (B, T) column
TOKEN_COLUMNS = ("input_ids", "tokens", "token_ids", "ids")
#: a loss this large is a diverged model: its exp is clipped as ``own_workload`` clips it
EXP_CLIP = 700.0


def named_columns(batch: Any) -> list[tuple[str, Any]]:
    """A batch's columns with their names (tuple and list columns are named by position)."""
    if isinstance(batch, dict):
        return [(str(k), v) for k, v in batch.items()]
    if isinstance(batch, (tuple, list)):
        return [(str(i), v) for i, v in enumerate(batch)]
    return [("0", batch)]


def integer_shape(column: Any) -> Optional[tuple[int, ...]]:
    """The shape of an integer tensor or array (MindSpore's ``Int32``, NumPy's ``int64``...), else None."""
    shape, dtype = getattr(column, "shape", None), str(getattr(column, "dtype", "")).lower()
    if shape is None or "int" not in dtype:
        return None
    return tuple(int(n) for n in shape)


def token_ids(batch: Any) -> Optional[tuple[str, tuple[int, ...]]]:
    """(name, shape) of the batch's token ids: a (batch, sequence) integer column, a named one first."""
    found = [(name, integer_shape(col)) for name, col in named_columns(batch)]
    found = [(name, shape) for name, shape in found if shape is not None and len(shape) == 2 and shape[1] > 1]
    named = [item for item in found if item[0].lower() in TOKEN_COLUMNS]
    return (named or found or [None])[0]


def per_sample_labels(batch: Any) -> bool:
    """Whether the batch has a class label per sample ((B,) or (B, 1) integers): a classifier's, not an LM's."""
    shapes = [integer_shape(col) for _, col in named_columns(batch)]
    return any(s is not None and (len(s) == 1 or (len(s) == 2 and s[1] == 1)) for s in shapes)


def holds_cross_entropy(network: Any) -> bool:
    """Whether the trained network (``Model``'s, loss cell included) holds a cross-entropy cell."""
    try:
        cells = [cell for _, cell in network.cells_and_names()]
    except Exception:  # noqa: BLE001 - not a Cell: nothing to recognise
        return False
    return any("crossentropy" in type(cell).__name__.lower() for cell in cells)


class ScriptLanguageModel:
    """What a script burst knows of its language model; fed the first training batch (``observe``) and the
    accuracy window's figures (``accuracy``)."""

    def __init__(self, spec: TrialSpec, result: TrialResult):
        script = spec.script
        self.result = result
        self.declared_tokens = script.tokens_per_sample if script is not None else None
        self.declared_loss = bool(script is not None and script.loss == "token_cross_entropy")
        self.recognised = False
        self.seen = False
        if self.declared_tokens:
            result.tokens_per_sample = self.declared_tokens

    def observe(self, batch: Any, network: Any = None) -> None:
        """The first training batch (and the network ``Model`` trains, where there is one)."""
        if self.seen or batch is None:
            return
        self.seen = True
        ids = token_ids(batch)
        if ids is None:
            return
        if self.declared_tokens is None:
            name, shape = ids
            self.result.tokens_per_sample = shape[1]
            column = f"'{name}'" if not name.isdigit() else f"column {name}"
            self.result.notes.append(Note(kind="info", text=(
                f"language model: {shape[1]} tokens per sample, the sequence dimension of the training batch's "
                f"token ids ({column}, shape {list(shape)}); workload.tokens_per_sample overrides it")))
        if network is not None and not per_sample_labels(batch) and holds_cross_entropy(network):
            self.recognised = True

    @property
    def token_loss(self) -> bool:
        """Whether the script's loss is a token cross-entropy (declared, or recognised on a language model)."""
        return bool(self.result.tokens_per_sample) and (self.declared_loss or self.recognised)

    def accuracy(self, acc: Optional[Accuracy]) -> None:
        """exp(loss) as the window's perplexity where the loss is a token cross-entropy."""
        if acc is None or not self.token_loss:
            return
        loss, source = (acc.val_loss, "validation") if acc.val_loss is not None else (acc.train_loss, "training")
        if loss is None or not math.isfinite(loss):
            acc.perplexity = None
            return
        acc.perplexity = math.exp(min(loss, EXP_CLIP))
        how = "declared by workload.loss" if self.declared_loss else "recognised: a cross-entropy over token ids"
        text = (f"perplexity is exp(the script's {source} loss) ({how})"
                + ("; the script has no validation" if source == "training" else ""))
        if not any(n.text == text for n in self.result.notes):
            self.result.notes = [n for n in self.result.notes if not n.text.startswith("perplexity is exp(")]
            self.result.notes.append(Note(kind="info", text=text))
