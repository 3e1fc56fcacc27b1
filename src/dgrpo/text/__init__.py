"""dgrpo.text: reading text as a reader sees it (shared by the ASR and the math reward)."""
