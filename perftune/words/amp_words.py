"""Why an AMP level failed on a model, and what to try instead: MindSpore's own message says neither.

O1 rewrites the model (``mindspore.rewrite``): it re-parses each cell class's source into a new module that keeps
only the imports of the class's file, so a name the class uses that its file defines itself (a decorator on
``__init__``, as mindformers' ``Linear`` has) is missing there.  O2 and O3 cast the whole network to float16; a model
with its own precision setting (``compute_dtype``, ``softmax_compute_type``) casts some tensors back itself, and a
matmul then meets a float32 and a float16 input.  Both are the model's, not the machine's: its own precision setting,
swept as a knob of the plan's own, is the way to try lower precision on it.
"""

from __future__ import annotations

#: where a knob of the plan's own reaches the model's precision setting
OWN_PRECISION = ("sweep the model's own precision setting (its compute_dtype, say) as a knob of your own instead: "
                 "knob_params for a build() workload's parameter, workload.knob_config for a field of a script's "
                 "config file")


def o1_rewrite_text(reason: str) -> str:
    return (f"amp_level=O1 cannot rewrite this model: O1 re-parses each cell class's source with only its file's "
            f"imports, and a name the class's file defines itself is missing there (MindSpore says {reason}); "
            f"{OWN_PRECISION}")


def dtype_collision_text(level: str, reason: str) -> str:
    return (f"amp_level={level} collides with the model's own precision casts: it casts the network to float16 and "
            f"the model casts some tensors back to its own dtype, so an operator gets mixed float32 and float16 "
            f"inputs (MindSpore says {reason}); {OWN_PRECISION}")
