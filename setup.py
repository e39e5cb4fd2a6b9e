"""Builds rlflow: CMake compiles the C++ core and the Cython extension taso_env._core
(and taso_env._cuda, the CUDA backend, where CUDA, cuDNN and cuBLAS are found);
setuptools installs the Python packages taso_env, worldmodel and controller."""

import os
import subprocess
import sys
from pathlib import Path

from setuptools import Extension, find_packages, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).parent.resolve()


class CMakeExtension(Extension):
    def __init__(self, name: str):
        super().__init__(name, sources=[])


class CMakeBuild(build_ext):
    """Configures and builds CMakeLists.txt, placing the module where setuptools wants it."""

    def build_extension(self, ext: Extension) -> None:
        out_dir = Path(self.get_ext_fullpath(ext.name)).parent.resolve()
        build_dir = Path(self.build_temp).resolve() / "cmake"
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
        jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL", str(os.cpu_count() or 2))
        subprocess.run(configure, check=True)
        subprocess.run(["cmake", "--build", str(build_dir), "--target", "_core", "-j", jobs], check=True)
        # The CUDA backend (taso_env._cuda) exists only where CMake found CUDA + cuDNN +
        # cuBLAS (RLFLOW_CUDA=AUTO|ON|OFF via RLFLOW_CMAKE_ARGS); it lands next to _core.
        cache = (build_dir / "CMakeCache.txt").read_text(errors="replace")
        if "RLFLOW_CUDA_ENABLED:INTERNAL=ON" in cache:
            subprocess.run(["cmake", "--build", str(build_dir), "--target", "_cuda", "-j", jobs], check=True)


setup(
    name="rlflow",
    version="0.1.0",
    description="Optimise neural-network computation graphs with verified substitutions chosen by RL",
    packages=find_packages(include=["taso_env", "taso_env.*", "worldmodel", "worldmodel.*",
                                    "controller", "controller.*"]),
    package_data={"taso_env": ["rules/*.json", "data/*.onnx"]},
    ext_modules=[CMakeExtension("taso_env._core")],
    cmdclass={"build_ext": CMakeBuild},
    python_requires=">=3.10",
    install_requires=["numpy>=2.0", "onnx>=1.16", "tqdm>=4.66"],
    zip_safe=False,
)
