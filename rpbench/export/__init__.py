"""Stage 5, export: the run's model card (``model/README.md``) and its upload to the Hugging Face Hub."""
