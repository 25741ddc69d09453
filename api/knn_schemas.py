"""Request and response bodies of a generate's token memory (kNN-MT: decoder.knn)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class KnnRequest(BaseModel):
    """The collection's token memory (kNN-MT) for this generate; see decoder.knn."""

    model_config = ConfigDict(strict=True, populate_by_name=True, extra="forbid")

    enabled: bool = Field(True, description="false: the decoder alone.")
    k: int = Field(8, ge=1, le=1024, description="Memory tokens that vote at each step.")
    lambda_: float = Field(0.35, ge=0.0, le=1.0, alias="lambda",
                           description="The most weight the memory's votes get.")
    temperature: float = Field(10.0, gt=0.0, description="Softmax temperature over the "
                               "voters' squared distances.")
    reach: float = Field(400.0, gt=0.0, description="λ shrinks linearly to 0 as the nearest "
                         "key's squared distance reaches this (nothing close: no effect).")
    adaptive: bool = Field(True, description="false: λ whatever the distance.")
    return_votes: bool = Field(False, description="Say which memory tokens voted for each "
                               "output token, with their weights.")


class KnnVote(BaseModel):
    id: str = Field(description="The translation-memory pair the voting token comes from.")
    token: str
    weight: float


class KnnToken(BaseModel):
    token: str = Field(description="An output token (the last is </s>).")
    lambda_: float = Field(alias="lambda", description="The memory's weight at this step.")
    p_memory: float = Field(description="The memory's probability of this token.")
    votes: list[KnnVote]


class KnnOut(BaseModel):
    keys: int = Field(description="Tokens in the memory.")
    mean_lambda: float = Field(description="The memory's mean weight over the steps "
                               "searched (every hypothesis of every step).")
    tokens: list[KnnToken] | None = Field(None, description="With return_votes.")
