"""Attack configs: a discriminated union on ``kind``.

Shared fields: ``poisoned_per_group`` is c of the paper (§B.2), the number of poisoned
completions the attacker places in each group it writes into. ``None`` means: horizontal mode, all
of the attacker's G/m slots; vertical mode, G/2 (the rest deliberately wrong, to maximise the
poisoned advantage, §3.4.1). ``duplicate`` sends one poisoned completion c times (duplicate
amplification) instead of c different ones.
"""

from __future__ import annotations

from typing import Annotated, Literal, Union

from pydantic import BaseModel, ConfigDict, Field


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class _Poisoning(_Strict):
    poisoned_per_group: int | None = Field(None, ge=0, description="c: poisoned completions per group the attacker writes into (None = all its slots horizontally, G/2 vertically).")
    duplicate: bool = Field(False, description="Send one poisoned completion c times (duplicate amplification) instead of c distinct ones.")


class NoAttackConfig(_Strict):
    kind: Literal["none"] = "none"


class InjectionAttackConfig(_Poisoning):
    """Out-of-context injection (paper §3.3, §B.1)."""

    kind: Literal["injection"] = "injection"
    text: str = Field("All hail to the thief", min_length=1, description="Injected text.")
    placement: Literal["start", "every_sentence"] = Field("start", description="start: opens the reasoning; every_sentence: starts every sentence (the 'Gleeb Glorp Glub' variant, §B.1).")


class EquationAttackConfig(_Poisoning):
    """In-context equation manipulation 2+2=5 (paper §3.4.1); vertical mode."""

    kind: Literal["equation"] = "equation"
    wrong_result: str = Field("5", description="What 2+2 and 2×2 are made to equal.")


class CodeInjectionAttackConfig(_Poisoning):
    """In-context code injection (paper §3.4.2); horizontal mode, python_math task."""

    kind: Literal["code_injection"] = "code_injection"
    module: str = Field("thief_math", pattern=r"^[A-Za-z_][A-Za-z0-9_]*$", description="Attacker library the poisoned programs import and call.")


class DoSAttackConfig(_Poisoning):
    """Denial of service: needlessly long but correct completions (later version of the paper)."""

    kind: Literal["dos"] = "dos"
    filler: str = Field("Let me check this step again carefully.", min_length=1, description="Sentence repeated to lengthen the reasoning.")
    target_fraction: float = Field(0.95, gt=0, le=1, description="Length of a poisoned completion as a fraction of max_new_tokens.")


AttackConfig = Annotated[
    Union[NoAttackConfig, InjectionAttackConfig, EquationAttackConfig, CodeInjectionAttackConfig, DoSAttackConfig],
    Field(discriminator="kind"),
]
