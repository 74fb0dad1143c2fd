# The README's quickstart as a Terraform configuration: hello-python and
# hello-node exposed on /fn, a cron trigger and a job.
#
#   export SLESS_ENDPOINT=http://127.0.0.1:8080   # optional: the local server is found by itself
#   export SLESS_TOKEN=...                         # optional for the local server
#   terraform init && terraform apply
#   curl -d '{"name": "sless"}' "$(terraform output -raw hello_url)"

terraform {
  required_providers {
    sless = {
      source = "naeel/sless"
    }
  }
}

# endpoint and token come from SLESS_ENDPOINT and SLESS_TOKEN, or from the
# server running from the local data directory, as the CLI finds it.
provider "sless" {}

resource "sless_function" "hello" {
  name       = "hello"
  runtime    = "python3.11"
  source_dir = "${path.module}/../../../examples/hello-python"
}

# What `sless deploy` does for you: expose the function on /fn.
resource "sless_trigger" "hello" {
  name     = "hello"
  function = sless_function.hello.name
  type     = "http"
}

resource "sless_function" "hello_node" {
  name       = "hello-node"
  runtime    = "nodejs20"
  source_dir = "${path.module}/../../../examples/hello-node"
  env        = { GREETING = "Hello" }
}

resource "sless_trigger" "hello_node" {
  name     = "hello-node"
  function = sless_function.hello_node.name
  type     = "http"
}

# Every night at 3 in Berlin, with a payload; a run still going at the next
# one is not overlapped.
resource "sless_trigger" "nightly" {
  name               = "nightly"
  function           = sless_function.hello.name
  type               = "cron"
  schedule           = "0 3 * * *"
  timezone           = "Europe/Berlin"
  payload            = jsonencode({ name = "cron" })
  concurrency_policy = "Forbid"
}

# Runs hello once; raise run_id to run it again.
resource "sless_job" "greet" {
  name     = "greet"
  function = sless_function.hello.name
  payload  = jsonencode({ name = "job" })
  run_id   = 1
}

data "sless_function" "hello" {
  name = sless_function.hello.name
}

data "sless_invocations" "greet" {
  function     = sless_function.hello.name
  trigger_kind = "job"
  depends_on   = [sless_job.greet]
}

output "hello_url" {
  value = sless_function.hello.invoke_url
}

output "hello_phase" {
  value = data.sless_function.hello.phase
}

output "job_result" {
  value = sless_job.greet.result
}

output "job_invocations" {
  value = length(data.sless_invocations.greet.invocations)
}
