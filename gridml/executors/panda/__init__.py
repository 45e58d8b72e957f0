"""The PanDA backend: trials as JEDI tasks through the real panda-client.

:mod:`.executor` (one task per trial attempt), :mod:`.request` and :mod:`.render` (the task
parameters, pure), :mod:`.client` (panda-client's status tuples turned into typed errors, and
nowhere else), :mod:`.sandbox` (the user's files), :mod:`.outputs` (what the pilot stored),
:mod:`.journal` (what a restarted controller needs), :mod:`.phpo_outputs` (the evaluation
tarballs of PanDA's own HPO service; its study driver is :mod:`gridml.phpo.driver`).
"""
