"""`lextra study`: the seed papers' comparisons at small scale, driven by one config file, in one report."""

from lextra.pipelines.study.config import ModelSpec, StudyConfig, load_study, parse_study
from lextra.pipelines.study.run import Cell, Study
from lextra.reporting.study import write_report

__all__ = ["Cell", "ModelSpec", "Study", "StudyConfig", "load_study", "parse_study", "write_report"]
