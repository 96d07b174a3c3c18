"""Why schemes extrapolate or not: attention resolution, empirical receptive field, attention dispersion."""

from lextra.analysis.capture import LayerAttention, LogitBlock, layer_attention
from lextra.analysis.dispersion import (
    Dispersion,
    FirstLayerLogits,
    QQSummary,
    RowStatistics,
    dispersion,
    row_entropy,
    row_max,
)
from lextra.analysis.receptive_field import (
    ReceptiveField,
    effective_receptive_field,
    gradient_shares,
    receptive_field,
)
from lextra.analysis.resolution import (
    ResolutionResult,
    ResolutionSummary,
    empirical_scores,
    model_theoretical,
    resolution,
    scheme_resolution,
    theoretical_scores,
)
from lextra.analysis.sinks import FirstTokenMass, first_token_mass

__all__ = [
    "Dispersion",
    "FirstLayerLogits",
    "FirstTokenMass",
    "LayerAttention",
    "LogitBlock",
    "QQSummary",
    "ReceptiveField",
    "ResolutionResult",
    "ResolutionSummary",
    "RowStatistics",
    "dispersion",
    "effective_receptive_field",
    "empirical_scores",
    "first_token_mass",
    "gradient_shares",
    "layer_attention",
    "model_theoretical",
    "receptive_field",
    "resolution",
    "row_entropy",
    "row_max",
    "scheme_resolution",
    "theoretical_scores",
]
