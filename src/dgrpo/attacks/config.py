"""Attack configs: a discriminated union on ``kind``."""

from __future__ import annotations

from typing import Annotated, Literal, Union

from pydantic import BaseModel, ConfigDict, Field


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class NoAttackConfig(_Strict):
    kind: Literal["none"] = "none"


AttackConfig = Annotated[Union[NoAttackConfig], Field(discriminator="kind")]
