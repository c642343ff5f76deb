"""Package discovery only; all metadata lives in pyproject.toml.

checks/, assistant/, tui/, runbooks/ and evals/ sit at the repository's top level for readability but install
under the fmdoctor namespace (never as generic top-level packages); their subpackages are found here
so adding one needs no edit to the packaging. Folders of data inside a package (fmdoctor/node/data, the demo's
recorded node) are namespace packages of their own, as setuptools wants them, found by find_namespace_packages;
pyproject.toml's package-data says which of their files ship.
"""

from setuptools import find_namespace_packages, find_packages, setup

MAPPED = {"fmdoctor.checks": "checks", "fmdoctor.assistant": "assistant", "fmdoctor.tui": "tui",
          "fmdoctor.runbooks": "runbooks", "fmdoctor.evals": "evals"}

packages = find_namespace_packages(include=["fmdoctor", "fmdoctor.*"], exclude=["*__pycache__*"])
package_dir = {"fmdoctor": "fmdoctor"}
for package, source in MAPPED.items():
    package_dir[package] = source
    packages += [package] + [f"{package}.{sub}" for sub in find_packages(where=source)]

setup(packages=packages, package_dir=package_dir)
