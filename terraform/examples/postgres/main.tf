# A Python function that reads its PostgreSQL connection from env and
# answers with a query result.
#
#   terraform apply -var 'database_url=postgresql://app:secret@db.internal:5432/app'
#   curl "$(terraform output -raw url)"

terraform {
  required_providers {
    sless = {
      source = "naeel/sless"
    }
  }
}

provider "sless" {}

variable "database_url" {
  type        = string
  sensitive   = true
  description = "libpq connection URL of the database the function queries."
}

resource "sless_function" "db" {
  name       = "db-now"
  runtime    = "python3.11"
  source_dir = "${path.module}/app" # with requirements.txt: the build installs psycopg
  env        = { STATEMENT_TIMEOUT_MS = "2000" }
  # Kept out of plan output.
  secret_env = { DATABASE_URL = var.database_url }
  # One connection per instance: a few instances are plenty for a database.
  max_instances = 4
}

resource "sless_trigger" "db" {
  name     = "db-now"
  function = sless_function.db.name
  type     = "http"
  auth     = "token" # callers need a token of the namespace
}

output "url" {
  value = sless_function.db.invoke_url
}
