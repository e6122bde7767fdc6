"""Sphinx configuration of the book (`make book`; scripts/build_book.py stages docs/ with the executed notebooks).

Sphinx + myst-nb + sphinx-book-theme, used directly: the architecture page says why not Jupyter Book itself.
"""

project = "balms"
author = "balms contributors"
html_title = "balms: a runnable companion to the BALMS paper"

extensions = ["myst_nb"]
source_suffix = {".md": "myst-nb", ".ipynb": "myst-nb"}
# docs/_generated/ holds the tables `make docs` writes: pages include them, they are no pages of their own
exclude_patterns = [".doctrees", "**.ipynb_checkpoints", "_generated"]

# the notebooks are shown as `make paper` executed and committed them: never re-run here
nb_execution_mode = "off"
# a notebook's stderr (the runner's progress bars) is not part of its lesson
nb_output_stderr = "remove"
myst_enable_extensions = ["colon_fence", "dollarmath", "deflist"]
myst_heading_anchors = 3

html_theme = "sphinx_book_theme"
html_theme_options = {
    "show_toc_level": 2,
    "use_download_button": True,
    "home_page_in_toc": True,
}
# an explicit mode: with none, the theme logs "invalid theme mode" on a first visit from a file:// URL
html_context = {"default_mode": "light"}
html_show_sourcelink = False
# wide tables and long output lines scroll within the column (docs/_static/balms.css)
html_static_path = ["_static"]
html_css_files = ["balms.css"]
html_last_updated_fmt = None


# Formulas ($...$, $$...$$) become MathML when the book is built (latex2mathml), which browsers render natively:
# no MathJax from a CDN, so the book's math shows offline and a page loads nothing from the network.
html_math_renderer = "mathml"


def _mathml(latex: str, block: bool) -> str:
    from latex2mathml.converter import convert

    return convert(latex, display="block" if block else "inline")


def _inline(self, node):
    from docutils import nodes

    self.body.append(f'<span class="math">{_mathml(node.astext(), False)}</span>')
    raise nodes.SkipNode


def _block(self, node):
    from docutils import nodes

    self.body.append(f'<div class="math">{_mathml(node.astext(), True)}</div>')
    raise nodes.SkipNode


def setup(app):
    app.add_html_math_renderer("mathml", (_inline, None), (_block, None))
