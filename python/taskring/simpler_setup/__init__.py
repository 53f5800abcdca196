"""Simpler's ``simpler_setup`` on taskring: compiling C++ programs (``KernelCompiler``)
and scene tests (``SceneTestCase``, docs/api.md §13.2, §13.3)."""

from .scene_test import CallableNamespace, Scalar, SceneTestCase, SceneTestLevel, TaskArgsBuilder, TensorArg, scene_level, scene_test

__all__ = [
    "CallableNamespace",
    "Scalar",
    "SceneTestCase",
    "SceneTestLevel",
    "TaskArgsBuilder",
    "TensorArg",
    "scene_level",
    "scene_test",
]
