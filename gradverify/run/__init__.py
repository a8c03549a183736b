"""A run: the plan's cases as tasks (``runner``), run in worker processes (``pool``, ``worker``)
or in this one, one case's checks in order (``execute``), and what is said about a case as a
whole (``casenotes``, ``leftovers``). ``tasks`` holds the tasks they share; the options of a
run are ``gradverify.options``."""
