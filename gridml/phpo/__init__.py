"""gridml inside PanDA's own HPO service (phpo + iDDS).

* :mod:`.steer`: ``gridml steer``, the steering command iDDS runs in a fresh container each step
  (reads ``%IN``, writes ``%OUT``), stateless and reproducible.
* :mod:`.spaces`: hpogrid's search-space format converted into gridml's (one validator checks it).
* :mod:`.evaluate`: ``gridml evaluate``, the evaluation command of a phpo job (one point, trained
  through gridml's own payload runtime).
"""
