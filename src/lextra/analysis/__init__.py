"""Why schemes extrapolate or not: attention resolution, empirical receptive field, attention dispersion."""

from lextra.analysis.capture import layer_attention
from lextra.analysis.dispersion import Dispersion, FirstLayerLogits, dispersion
from lextra.analysis.receptive_field import ReceptiveField, receptive_field
from lextra.analysis.resolution import ResolutionSummary, empirical_scores, model_theoretical, resolution
from lextra.analysis.sinks import first_token_mass

__all__ = [
    "Dispersion",
    "FirstLayerLogits",
    "ReceptiveField",
    "ResolutionSummary",
    "dispersion",
    "empirical_scores",
    "first_token_mass",
    "layer_attention",
    "model_theoretical",
    "receptive_field",
    "resolution",
]
