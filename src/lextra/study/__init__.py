"""`lextra study`: the seed papers' comparisons at small scale, driven by one config file, in one report."""

from lextra.study.config import ModelSpec, StudyConfig, load_study, parse_study
from lextra.study.report import write_report
from lextra.study.run import Study

__all__ = ["ModelSpec", "Study", "StudyConfig", "load_study", "parse_study", "write_report"]
