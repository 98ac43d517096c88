"""UPDATE and conditional MERGE (issue 31): against DuckDB, models, crashes."""
