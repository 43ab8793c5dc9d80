"""The entry points: the ``etj`` command (``main``) and its subcommands (``init``,
``convert``, ``run``, ``operator``, the plan view), and the file reading they share
(``files``). Commands read files and print; the logic they call lives below them. Extra
subcommands come from other distributions through the ``etj.commands`` entry-point group
(the test cluster's ``etj cluster``): the product imports none of them.
"""
