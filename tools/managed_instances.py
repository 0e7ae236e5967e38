"""Write the Lambda Managed Instances variant of a SAM template.

    .tools/venv-sam/bin/python tools/managed_instances.py template.yaml OUT.yaml

`make template-managed-instances` runs it. The deployed default stays
template.yaml, on Lambda's own fleet: this variant is optional. SAM cannot
switch CapacityProviderConfig on and off with a parameter (its translator
refuses Fn::If there), so the variant is a second template made from the
first, never edited by hand. Every AWS::Serverless::Function gets:

- CapacityProviderConfig on the capacity provider CapacityProviderArn (a
  parameter: the provider, its VPC and its operator role are the
  account's, made once for every function that trusts the others on it),
  with PerExecutionEnvironmentMaxConcurrency (a parameter, default 8) and
  ExecutionEnvironmentMemoryGiBPerVCpu 2;
- MemorySize 2048, the smallest Managed Instances allows;
- AutoPublishAlias live: Managed Instances run published versions, and SAM
  points the function's event sources and API routes at the alias.

Its output is checked by `make sam-check` (sam validate, with and without
--lint). docs/deploy.md says what else the account needs.
"""

import os
import sys

from samcli.yamlhelper import parse_yaml_file, yaml_dump

PARAMETERS = {
    "CapacityProviderArn": {
        "Type": "String",
        "AllowedPattern": "^arn:aws[a-zA-Z-]*:lambda:[a-z0-9-]+:[0-9]{12}:capacity-provider:[a-zA-Z0-9-_]+$",
        "ConstraintDescription": "must be the ARN of a Lambda capacity provider",
        "Description": "The Lambda Managed Instances capacity provider the functions run on.",
    },
    "PerEnvironmentConcurrency": {
        "Type": "Number",
        "Default": 8,
        "MinValue": 1,
        "MaxValue": 1600,
        "Description": (
            "Invocations one execution environment (one process) serves at once "
            "(PerExecutionEnvironmentMaxConcurrency; AWS_LAMBDA_MAX_CONCURRENCY)."
        ),
    },
}


def variant(template, codeuri_base):
    """Returns the variant of template. A relative CodeUri is made relative
    to codeuri_base (the template's directory, seen from the output's)."""
    template.setdefault("Parameters", {}).update(PARAMETERS)
    functions = [
        props
        for res in template.get("Resources", {}).values()
        if res.get("Type") == "AWS::Serverless::Function"
        for props in [res.setdefault("Properties", {})]
    ]
    if not functions:
        raise SystemExit("managed_instances: the template has no AWS::Serverless::Function")
    for props in functions:
        props["CapacityProviderConfig"] = {
            "Arn": {"Ref": "CapacityProviderArn"},
            "PerExecutionEnvironmentMaxConcurrency": {"Ref": "PerEnvironmentConcurrency"},
            "ExecutionEnvironmentMemoryGiBPerVCpu": 2,
        }
        props["MemorySize"] = 2048
        props["AutoPublishAlias"] = "live"
        uri = props.get("CodeUri")
        if isinstance(uri, str) and not os.path.isabs(uri) and "://" not in uri:
            props["CodeUri"] = os.path.normpath(os.path.join(codeuri_base, uri))
    return template


def main():
    if len(sys.argv) != 3:
        raise SystemExit("usage: managed_instances.py TEMPLATE OUT")
    src, dst = sys.argv[1], sys.argv[2]
    base = os.path.relpath(os.path.dirname(os.path.abspath(src)), os.path.dirname(os.path.abspath(dst)))
    out = yaml_dump(variant(parse_yaml_file(src), base))
    with open(dst, "w", encoding="utf-8") as f:
        f.write(out)


if __name__ == "__main__":
    main()
