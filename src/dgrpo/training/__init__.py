"""Run infrastructure the recipes share: build a run, evaluate it, record, checkpoint, resume and loop over rounds."""
