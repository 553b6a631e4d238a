"""The one thing pyproject.toml cannot yet say stably: the optional C kernels.

git_mgit/codecs/planes.py falls back to numpy when they could not be built
(no compiler), so a failed build is a warning, not an install failure.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "git_mgit.codecs._native",
            sources=["git_mgit/codecs/_native.c"],
            extra_compile_args=["-O3"],
            optional=True,
        )
    ]
)
