"""Builds rlflow: CMake compiles the C++ core and the Cython extension taso_env._core
(and taso_env._cuda, the CUDA backend, where CUDA, cuDNN and cuBLAS are found);
setuptools installs the Python packages taso_env (with data/ as taso_env.data),
worldmodel, controller, tuner_agents (the GA-DQN tuner) and rlflow (the `rlflow` command)."""

import os
import subprocess
import sys
from pathlib import Path

from setuptools import Extension, find_packages, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).parent.resolve()


class CMakeExtension(Extension):
    """A module built by CMakeLists.txt (the CMake target is the module's last name)."""

    def __init__(self, name: str, optional: bool = False):
        super().__init__(name, sources=[], optional=optional)


class CMakeBuild(build_ext):
    """Configures and builds CMakeLists.txt, placing the module where setuptools wants it."""

    def build_extension(self, ext: Extension) -> None:
        out_dir = Path(self.get_ext_fullpath(ext.name)).parent.resolve()
        build_dir = self._configure(out_dir)
        target = ext.name.rsplit(".", 1)[-1]
        if target == "_cuda":
            # The CUDA backend exists only where CMake found CUDA + cuDNN + cuBLAS
            # (RLFLOW_CUDA=AUTO|ON|OFF via RLFLOW_CMAKE_ARGS). It is registered as an
            # optional extension, so an install without it is complete, and one with it
            # gets the module copied like _core (pip install . and pip install -e .).
            cache = (build_dir / "CMakeCache.txt").read_text(errors="replace")
            if "RLFLOW_CUDA_ENABLED:INTERNAL=ON" not in cache:
                print("rlflow: CUDA backend not built (CMake found no CUDA toolkit with cuDNN and cuBLAS)")
                return
        jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL", str(os.cpu_count() or 2))
        subprocess.run(["cmake", "--build", str(build_dir), "--target", target, "-j", jobs], check=True)

    def _configure(self, out_dir: Path) -> Path:
        """Configures CMakeLists.txt once per build, with the modules' output folder."""
        build_dir = Path(self.build_temp).resolve() / "cmake"
        if getattr(self, "_configured", None) == build_dir:
            return build_dir
        build_dir.mkdir(parents=True, exist_ok=True)
        config = "Debug" if self.debug else "Release"
        configure = [
            "cmake", "-S", str(ROOT), "-B", str(build_dir),
            f"-DCMAKE_BUILD_TYPE={config}",
            f"-DPython3_EXECUTABLE={sys.executable}",
            f"-DRLFLOW_PYTHON_OUTPUT_DIR={out_dir}",
            "-DRLFLOW_BUILD_TESTS=OFF",
        ]
        configure += os.environ.get("RLFLOW_CMAKE_ARGS", "").split()
        subprocess.run(configure, check=True)
        self._configured = build_dir
        return build_dir


setup(
    name="rlflow",
    version="0.1.0",
    description="Optimise neural-network computation graphs with verified substitutions chosen by RL",
    packages=find_packages(include=["taso_env", "taso_env.*", "worldmodel", "worldmodel.*",
                                    "controller", "controller.*", "rlflow", "rlflow.*", "tuner_agents",
                                    "tuner_agents.*"]) + ["taso_env.data"],
    # The repository's data/ (shipped shape-only models, measured cost tables) installs
    # as taso_env.data, so an installed rlflow finds it without the source tree.
    package_dir={"taso_env.data": "data"},
    package_data={"taso_env": ["rules/*.json", "rules/README.md"],
                  "taso_env.data": ["models/*.onnx", "models/README.md", "costs/*.h5", "costs/*.tsv", "tuning/*.h5"]},
    ext_modules=[CMakeExtension("taso_env._core"), CMakeExtension("taso_env._cuda", optional=True)],
    entry_points={"console_scripts": ["rlflow = rlflow.cli:main"]},
    cmdclass={"build_ext": CMakeBuild},
    python_requires=">=3.10",
    install_requires=["numpy>=2.0", "onnx>=1.16", "tqdm>=4.66"],
    extras_require={
        "ray": ["ray==2.60.0"],  # --ray: collection and evaluation on a Ray cluster
        # The engine and the Gymnasium env (rollout files included) without TensorFlow,
        # for users who bring their own agent (stable-baselines3, CleanRL, RLlib).
        "env": ["gymnasium>=1.4,<2", "h5py>=3.10,<3.15"],
    },
    zip_safe=False,
)
