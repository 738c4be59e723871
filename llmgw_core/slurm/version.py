"""Which Slurm a login node runs (`scontrol --version`), and so which node listing it prints."""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict

from llmgw_core.errors import shown_value
from llmgw_core.slurm.text import SlurmOutputUnreadable, checked_text

OLDEST = (20, 11)
"""The oldest release the readers are written for (docs/slurm.md)."""
_VERSION = re.compile(r"^slurm(?:-wlm)?\s+(\d{2})\.(\d{2})\.(\d+)(?:[-.][0-9A-Za-z.+~-]*)?$")


class SlurmVersion(BaseModel):
    """A Slurm release: `22.05.8` is major 22, minor 5, micro 8."""

    model_config = ConfigDict(frozen=True)

    major: int
    minor: int
    micro: int

    @property
    def release(self) -> tuple[int, int]:
        """`(22, 5)`: what formats depend on."""
        return (self.major, self.minor)

    @property
    def node_listing(self) -> str:
        """How this release prints its nodes best: `scontrol-json` (23.02 on), `sinfo-json`
        (21.08, 22.05) or `oneline` (`scontrol -o -d show node`, every release). JSON needs
        Slurm's JSON serializer, which a site may have built without: fall back to `oneline`."""
        if self.release >= (23, 2):
            return "scontrol-json"
        if self.release >= (21, 8):
            return "sinfo-json"
        return "oneline"

    def __str__(self) -> str:
        return f"{self.major}.{self.minor:02d}.{self.micro}"


def read_version(text: str, source: str = "scontrol --version") -> SlurmVersion:
    """The release `scontrol --version` (or `sinfo --version`) printed: `slurm 23.11.4`,
    Debian's `slurm-wlm 22.05.8`.

    Raises:
        SlurmOutputUnreadable: anything else, or a release older than 20.11.
    """
    line = checked_text(text, source).strip()
    match = _VERSION.match(line)
    if match is None:
        raise SlurmOutputUnreadable(
            f"{source} printed {shown_value(line)}, not a Slurm version",
            "is this a Slurm login node? `scontrol --version` should print `slurm 23.11.4`",
        )
    version = SlurmVersion(major=int(match[1]), minor=int(match[2]), micro=int(match[3]))
    if version.release < OLDEST:
        raise SlurmOutputUnreadable(
            f"Slurm {version} is older than {OLDEST[0]}.{OLDEST[1]:02d}, the oldest llmgw reads",
            "ask the site for a supported release",
        )
    return version
