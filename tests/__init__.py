"""streamd's tests: tests/<pkg>/test_<module>.py per module of streamd/<pkg>/<module>.py.

Every folder is a package so that test modules of the same name in different folders
(tests/decode/test_kws.py, tests/evaluation/test_kws.py) do not collide; shared helpers are
in tests/helpers.py (importable as ``helpers``: pyproject.toml puts tests/ on the path) and
shared fixtures in tests/conftest.py.
"""
