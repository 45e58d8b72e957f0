"""gridml inside PanDA's own HPO service (phpo + iDDS).

* :mod:`.steer`: ``gridml steer``, the steering command iDDS runs in a fresh container each step
  (reads ``%IN``, writes ``%OUT``), stateless and reproducible.
* :mod:`.spaces`: hpogrid's search-space format converted into gridml's (one validator checks it).
* :mod:`.evaluate`: ``gridml evaluate``, the evaluation command of a phpo job (one point, trained
  through gridml's own payload runtime).
* :mod:`.task`: the study's one phpo task, its parameters built by panda-client's phpo.
* :mod:`.driver`: ``backend.executor: phpo`` on the controller's side, a study driver (not an
  executor): it submits the task once and records its evaluations as the study's trials; the dry
  run is the same path with a client that submits nothing.
"""
