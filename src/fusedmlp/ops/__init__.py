"""Host side of each fused op: validation, launch, autograd, torch.library registration, reference.

One module per fused pattern (``glu``, ``linear_act``, ``swiglu``); the public functions are
exported from the top-level ``fusedmlp`` package. (Not re-exported here: ``linear_act`` and
``swiglu`` would shadow their own modules.)
"""
