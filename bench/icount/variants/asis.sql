-- the schema as installed
SELECT 1
