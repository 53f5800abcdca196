"""Simpler's ``simpler_setup`` on taskring: compiling C++ programs (``KernelCompiler``,
``pto_isa``) and scene tests (``SceneTestCase``, docs/api.md §13.2, §13.3)."""

from .elf_parser import extract_text_section
from .kernel_compiler import KernelCompiler
from .pto_isa import ensure_pto_isa_root
from .scene_test import CallableNamespace, Scalar, SceneTestCase, SceneTestLevel, TaskArgsBuilder, TensorArg, scene_level, scene_test

__all__ = [
    "CallableNamespace",
    "KernelCompiler",
    "Scalar",
    "SceneTestCase",
    "SceneTestLevel",
    "TaskArgsBuilder",
    "TensorArg",
    "ensure_pto_isa_root",
    "extract_text_section",
    "scene_level",
    "scene_test",
]
