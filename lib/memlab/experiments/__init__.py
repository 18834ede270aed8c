"""Layer experiments: one package per chapter (spec, stages, tables, claims).

A chapter declares its parameters, runs its stages on the science layer's methods and judges its
claims; ``memlab.run`` executes it through the chapter's notebook.

May import: core, data, models, science, report.
"""
