"""docker-compose.yml, Dockerfile and .env.example, checked without a Docker engine (none
runs here): ``docker-compose config`` (Debian's docker-compose 1.29, installed by the
fixture when missing) validates and resolves the file with a test .env, and the tests read
what it printed. Nothing here builds an image or starts a container."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from api.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
SECRETS = {"MINIO_ACCESS_KEY": "qkv-test-user", "MINIO_SECRET_KEY": "test-minio-secret-1",
           "MILVUS_ROOT_PASSWORD": "test-milvus-secret-2"}
SERVICES = {"etcd", "minio", "milvus", "api"}
VOLUMES = {"etcd": "/etcd", "minio": "/minio_data", "milvus": "/var/lib/milvus",
           "api": "/app/var"}


def _apt_install() -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    return subprocess.run(["apt-get", "install", "-y", "--no-install-recommends",
                           "docker-compose"], capture_output=True, text=True, env=env,
                          timeout=900)


@pytest.fixture(scope="session")
def docker_compose() -> str:
    """The ``docker-compose`` executable; installed with apt-get when missing and we are
    root. Skips, saying why, only when it cannot be installed."""
    exe = shutil.which("docker-compose")
    if exe is None:
        if os.geteuid() != 0 or shutil.which("apt-get") is None:
            pytest.skip("docker-compose is missing and cannot be installed here (needs root "
                        "and apt-get): apt-get install docker-compose")
        r = _apt_install()
        if r.returncode != 0:  # package lists may be missing on a fresh machine
            subprocess.run(["apt-get", "update"], capture_output=True, timeout=600)
            r = _apt_install()
        exe = shutil.which("docker-compose")
        if exe is None:
            pytest.skip(f"apt-get install docker-compose failed:\n{r.stderr[-2000:]}")
    return exe


def compose_config(docker_compose: str, tmp_path: Path,
                   env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``docker-compose config`` with ``env`` as the .env file, in a clean environment (no
    variable of this process leaks into the interpolation)."""
    env_file = tmp_path / "test.env"
    env_file.write_text("".join(f"{k}={v}\n" for k, v in env.items()))
    return subprocess.run(
        [docker_compose, "--project-directory", str(ROOT), "-f", str(ROOT / "docker-compose.yml"),
         "--env-file", str(env_file), "config"],
        capture_output=True, text=True, timeout=120,
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path)})


@pytest.fixture
def config(docker_compose: str, tmp_path: Path) -> dict[str, Any]:
    r = compose_config(docker_compose, tmp_path, SECRETS)
    assert r.returncode == 0, r.stderr
    return dict(yaml.safe_load(r.stdout))


def volume_mounts(service: dict[str, Any]) -> dict[str, str]:
    """target -> source, from the short ('src:dst:rw', compose 1.x) or long (2.x) form."""
    mounts = {}
    for v in service.get("volumes", []):
        if isinstance(v, str):
            source, target = v.split(":")[:2]
        else:
            source, target = v.get("source", ""), v["target"]
        mounts[target] = source
    return mounts


def env_names(path: Path) -> dict[str, str]:
    return dict(line.split("=", 1) for line in path.read_text().splitlines()
                if line and not line.startswith("#"))


def test_services_have_health_checks_and_start_in_order(config: dict[str, Any]) -> None:
    services = config["services"]
    assert set(services) == SERVICES
    for name, service in services.items():
        check = service.get("healthcheck", {})
        assert check.get("test") and not check.get("disable"), f"{name} has no health check"
    milvus, api = services["milvus"], services["api"]
    assert "http://localhost:9091/healthz" in milvus["healthcheck"]["test"]
    assert "/health" in " ".join(api["healthcheck"]["test"])
    assert milvus["depends_on"] == {"etcd": {"condition": "service_healthy"},
                                    "minio": {"condition": "service_healthy"}}
    assert api["depends_on"] == {"milvus": {"condition": "service_healthy"}}
    assert milvus["command"] == ["milvus", "run", "standalone"]
    assert re.fullmatch(r"milvusdb/milvus:v2\.[56]\.\d+", milvus["image"]), milvus["image"]
    assert milvus["environment"]["ETCD_ENDPOINTS"] == "etcd:2379"
    assert milvus["environment"]["MINIO_ADDRESS"] == "minio:9000"
    assert api["environment"]["QKV_STORE"] == "http://milvus:19530"
    assert api["build"]["context"] == str(ROOT)


def test_data_lives_in_named_volumes(config: dict[str, Any]) -> None:
    named = set(config.get("volumes", {}))
    for name, target in VOLUMES.items():
        source = volume_mounts(config["services"][name]).get(target)
        assert source in named, f"{name}:{target} is mounted from {source!r}, not a named volume"


def test_credentials_come_from_the_env_file(config: dict[str, Any]) -> None:
    minio = config["services"]["minio"]["environment"]
    milvus = config["services"]["milvus"]["environment"]
    api = config["services"]["api"]["environment"]
    assert (minio["MINIO_ROOT_USER"], minio["MINIO_ROOT_PASSWORD"]) == (
        SECRETS["MINIO_ACCESS_KEY"], SECRETS["MINIO_SECRET_KEY"])
    assert (milvus["MINIO_ACCESS_KEY_ID"], milvus["MINIO_SECRET_ACCESS_KEY"]) == (
        SECRETS["MINIO_ACCESS_KEY"], SECRETS["MINIO_SECRET_KEY"])
    assert str(milvus["COMMON_SECURITY_AUTHORIZATIONENABLED"]).lower() == "true"
    assert milvus["COMMON_SECURITY_DEFAULTROOTPASSWORD"] == SECRETS["MILVUS_ROOT_PASSWORD"]
    assert api["QKV_MILVUS_TOKEN"] == f"root:{SECRETS['MILVUS_ROOT_PASSWORD']}"
    assert "minioadmin" not in yaml.safe_dump(config)  # MinIO's and Milvus' default


@pytest.mark.parametrize("missing", sorted(SECRETS))
def test_a_missing_secret_stops_compose(docker_compose: str, tmp_path: Path,
                                        missing: str) -> None:
    env = {**SECRETS, missing: ""}
    r = compose_config(docker_compose, tmp_path, env)
    assert r.returncode != 0 and missing in r.stderr, r.stderr


def test_env_example_is_complete_and_has_no_secrets(docker_compose: str,
                                                    tmp_path: Path) -> None:
    example = env_names(ROOT / ".env.example")
    used = set(re.findall(r"\$\{(\w+)", (ROOT / "docker-compose.yml").read_text()))
    assert used <= set(example), f"not in .env.example: {used - set(example)}"
    assert all(example[k] == "" for k in SECRETS)
    r = compose_config(docker_compose, tmp_path, example)  # copied unchanged: refused
    assert r.returncode != 0


def test_env_file_settings_reach_the_api(docker_compose: str, tmp_path: Path) -> None:
    env = {**SECRETS, "QKV_API_KEY": "k-123", "QKV_MAX_TOP_K": "7", "API_PORT": "18080"}
    r = compose_config(docker_compose, tmp_path, env)
    assert r.returncode == 0, r.stderr
    api = yaml.safe_load(r.stdout)["services"]["api"]
    assert api["environment"]["QKV_API_KEY"] == "k-123"
    assert str(api["environment"]["QKV_MAX_TOP_K"]) == "7"
    published = [p if isinstance(p, str) else str(p.get("published")) for p in api["ports"]]
    assert any("18080" in p for p in published), api["ports"]
    fields = {f"QKV_{name.upper()}" for name in Settings.model_fields}
    s3 = {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"}  # the S3 client's, for backups
    unknown = set(api["environment"]) - fields - s3
    assert not unknown, f"not settings of api/settings.py: {unknown}"
    example = (ROOT / ".env.example").read_text()
    assert set(api["environment"]) - {"QKV_STORE", "QKV_MILVUS_TOKEN"} <= set(
        env_names(ROOT / ".env.example"))
    # a setting the compose file does not pass is at least named there (with the way to set it)
    missing = {f for f in fields if f not in example}
    assert not missing, f"settings not in .env.example: {missing}"


def test_dockerfile(tmp_path: Path) -> None:
    text = (ROOT / "Dockerfile").read_text()
    lines = [ln.strip() for ln in text.replace("\\\n", " ").splitlines()
             if ln.strip() and not ln.strip().startswith("#")]
    args = dict(ln.split(None, 1)[1].split("=", 1) for ln in lines
                if ln.startswith("ARG ") and "=" in ln)
    assert re.fullmatch(r"python:3\.11-slim(-\w+)?", args["PYTHON_IMAGE"])
    assert args["TORCH_INDEX"] == "https://download.pytorch.org/whl/cpu"
    users = [ln.split()[1] for ln in lines if ln.startswith("USER ")]
    assert users and users[-1] not in ("root", "0")
    healthcheck = next(ln for ln in lines if ln.startswith("HEALTHCHECK "))
    assert "/health" in healthcheck
    cmd = next(ln for ln in lines if ln.startswith("CMD "))
    assert '"qkv", "serve", "--host", "0.0.0.0"' in cmd
    copied = [ln.split()[1] for ln in lines if ln.startswith("COPY ")]
    # every package the project installs (pyproject's find include), the models, the demo data
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    packages = [p.rstrip("*") + "/" for p in
                pyproject["tool"]["setuptools"]["packages"]["find"]["include"]]
    assert {"models/", "data/demo/", *packages} <= set(copied)
    assert (ROOT / "models" / "encoder-default" / "model.safetensors").exists()
    ignored = (ROOT / ".dockerignore").read_text().split()
    assert {".env", ".venv", "var", ".git"} <= set(ignored)
    # the layer that lists the dependencies runs as written
    run = next(ln for ln in lines if "tomllib" in ln)
    py = shlex.split(run.split("RUN ", 1)[1].split(" > ")[0])
    assert py[0] == "python"
    py[0] = sys.executable
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    out = subprocess.run(py, cwd=tmp_path, capture_output=True, text=True, check=True).stdout
    assert "torch>=2.3" in out.splitlines() and "pymilvus>=3.0,<3.1" in out.splitlines()


def test_api_serves_the_demo_translation_memory(config: dict[str, Any],
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """The api service's environment, read as the container's ``qkv serve`` reads it,
    seeds both demo collections and gives `tm-en-fr` the shipped decoder; the paths are
    relative to /app, which holds what they name in this checkout."""
    env = config["services"]["api"]["environment"]
    for name in [n for n in os.environ if n.startswith("QKV_")]:
        monkeypatch.delenv(name)
    for name, value in env.items():
        monkeypatch.setenv(name, "" if value is None else str(value))
    s = Settings()
    assert s.decoders == {"tm-en-fr": Path("models/decoder-en-fr")}
    assert s.demo_tm == Path("data/demo/multi30k-en-fr.jsonl.gz")
    assert s.demo_tm_collection == "tm-en-fr"
    for path in (s.demo_corpus, s.demo_tm, s.decoders["tm-en-fr"] / "model.safetensors"):
        assert path is not None and (ROOT / path).is_file(), path
