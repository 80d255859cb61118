"""Write docs/hooks.md, the hook reference generated from core/edgebyoc/hookspecs.py."""

from pathlib import Path

from edgebyoc.hookspecs import reference_markdown

if __name__ == "__main__":
    page = Path(__file__).resolve().parents[1] / "docs" / "hooks.md"
    page.write_text(reference_markdown())
    print(f"wrote {page}")
