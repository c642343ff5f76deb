"""Package discovery only; all metadata lives in pyproject.toml.

checks/, assistant/, tui/, runbooks/ and evals/ sit at the repository's top level for readability but install
under the fmdoctor namespace (never as generic top-level packages); their subpackages are found here
so adding one needs no edit to the packaging.
"""

from setuptools import find_packages, setup

MAPPED = {"fmdoctor.checks": "checks", "fmdoctor.assistant": "assistant", "fmdoctor.tui": "tui",
          "fmdoctor.runbooks": "runbooks", "fmdoctor.evals": "evals"}

packages = find_packages(include=["fmdoctor", "fmdoctor.*"])
package_dir = {"fmdoctor": "fmdoctor"}
for package, source in MAPPED.items():
    package_dir[package] = source
    packages += [package] + [f"{package}.{sub}" for sub in find_packages(where=source)]

setup(packages=packages, package_dir=package_dir)
