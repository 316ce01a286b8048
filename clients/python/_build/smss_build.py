"""A PEP 517 build backend on the standard library alone.

`pip install ./clients/python` needs no package index: the build has no
requirements (setuptools would have to be downloaded into pip's isolated
build environment). It builds a pure-Python wheel of the smss package.
"""

import base64
import hashlib
import os
import re
import zipfile

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NAME = "smss"


def _version():
    with open(os.path.join(HERE, NAME, "__init__.py"), encoding="utf-8") as f:
        return re.search(r'^__version__ = "([^"]+)"', f.read(), re.M).group(1)


def _metadata(version):
    with open(os.path.join(HERE, "README.md"), encoding="utf-8") as f:
        readme = f.read()
    return (f"Metadata-Version: 2.1\nName: {NAME}\nVersion: {version}\n"
            "Summary: Client for the smss message queue (standard library only)\n"
            "Requires-Python: >=3.9\n"
            "Description-Content-Type: text/markdown\n\n" + readme)


def _record_line(path, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{path},sha256={digest},{len(data)}"


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    version = _version()
    dist_info = f"{NAME}-{version}.dist-info"
    wheel_name = f"{NAME}-{version}-py3-none-any.whl"
    files = []
    pkg = os.path.join(HERE, NAME)
    for fn in sorted(os.listdir(pkg)):
        if fn.endswith(".py"):
            with open(os.path.join(pkg, fn), "rb") as f:
                files.append((f"{NAME}/{fn}", f.read()))
    files.append((f"{dist_info}/METADATA", _metadata(version).encode()))
    files.append((f"{dist_info}/WHEEL",
                  b"Wheel-Version: 1.0\nGenerator: smss_build\nRoot-Is-Purelib: true\nTag: py3-none-any\n"))
    record = [_record_line(p, d) for p, d in files] + [f"{dist_info}/RECORD,,"]
    files.append((f"{dist_info}/RECORD", ("\n".join(record) + "\n").encode()))
    with zipfile.ZipFile(os.path.join(wheel_directory, wheel_name), "w", zipfile.ZIP_DEFLATED) as z:
        for p, d in files:
            z.writestr(p, d)
    return wheel_name


def build_sdist(sdist_directory, config_settings=None):
    import tarfile
    version = _version()
    base = f"{NAME}-{version}"
    name = f"{base}.tar.gz"
    with tarfile.open(os.path.join(sdist_directory, name), "w:gz") as t:
        for rel in ["pyproject.toml", "README.md", "_build/smss_build.py"] + [
                f"{NAME}/{fn}" for fn in sorted(os.listdir(os.path.join(HERE, NAME))) if fn.endswith(".py")]:
            t.add(os.path.join(HERE, rel), arcname=f"{base}/{rel}")
    return name
